"""Shipping the sdr plugin (issue 33, item 5): docker-compose.yml's OpenSearch is built by
opensearch-plugin/Dockerfile, which builds the plugin for the very release it installs it into, and
Dashboards is pinned to that release too. A plugin matches exactly one OpenSearch version, so the compose
build arg, the Dockerfile's default, the image it starts FROM, the version the Maven build is given and the
Dashboards tag must be one and the same. (No Docker engine runs these files here: the Maven build for the
pinned version is checked by hand, see docs/opensearch.md.)

Also: the plugin's version in pom.xml (its protocol, in the descriptor and ``_cat/plugins``) equals the
one the Python store speaks (:data:`sdr_search.indexer.opensearch.plugin_version.PLUGIN_VERSION`).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from sdr_search.indexer.opensearch import plugin_version

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "opensearch-plugin"
POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def _compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))


def _dockerfile() -> str:
    return (PLUGIN / "Dockerfile").read_text(encoding="utf-8")


def _pom() -> ET.Element:
    return ET.parse(PLUGIN / "pom.xml").getroot()


def test_compose_dockerfile_and_dashboards_name_one_opensearch_version():
    services = _compose()["services"]
    opensearch = services["opensearch"]
    build = opensearch["build"]
    assert (ROOT / build["context"]).resolve() == PLUGIN.resolve()
    assert build.get("dockerfile", "Dockerfile") == "Dockerfile"
    version = str(build["args"]["OPENSEARCH_VERSION"])
    assert re.fullmatch(r"\d+\.\d+\.\d+", version), version
    assert opensearch["image"].endswith(f":{version}")  # the built image is tagged with its release
    assert services["dashboards"]["image"] == f"opensearchproject/opensearch-dashboards:{version}"

    text = _dockerfile()
    assert re.findall(r"^ARG OPENSEARCH_VERSION=(\S+)$", text, re.M) == [version]  # the default, before any FROM
    froms = re.findall(r"^FROM (\S+)(?: AS (\S+))?$", text, re.M)
    assert froms[-1] == ("opensearchproject/opensearch:${OPENSEARCH_VERSION}", "")  # the final image: that release
    build_stage = [image for image, name in froms if name == "build"]
    assert build_stage and build_stage[0].startswith("maven:") and re.search(r"temurin-(17|21)\b", build_stage[0])
    # the build stage re-declares the arg (an ARG before FROM is not visible inside a stage) and builds for it
    stage = text.split(" AS build", 1)[1].split("\nFROM ", 1)[0]
    assert re.search(r"^ARG OPENSEARCH_VERSION$", stage, re.M)
    assert "-Dopensearch.version=${OPENSEARCH_VERSION}" in stage
    assert "target/os-${OPENSEARCH_VERSION}/sdr-opensearch-plugin-${OPENSEARCH_VERSION}.zip" in stage
    assert re.search(r"opensearch-plugin install --batch file:///\S+\.zip", text)


def test_the_dockerfile_builds_what_the_pom_produces():
    pom = _pom()
    build = pom.find("m:build", POM_NS)
    assert build.find("m:directory", POM_NS).text.endswith("target/os-${opensearch.version}")
    assert build.find("m:finalName", POM_NS).text == "sdr-opensearch-plugin-${opensearch.version}"
    # the build without tests leaves the test framework out (its dependencies are missing for some releases)
    profile = pom.find("m:profiles/m:profile", POM_NS)
    assert profile.find("m:activation/m:property/m:name", POM_NS).text == "!maven.test.skip"
    assert [d.find("m:artifactId", POM_NS).text for d in profile.findall("m:dependencies/m:dependency", POM_NS)] == ["framework"]
    assert [d.find("m:artifactId", POM_NS).text for d in pom.findall("m:dependencies/m:dependency", POM_NS)] == ["opensearch"]
    assert "-Dmaven.test.skip=true" in _dockerfile()
    assert (PLUGIN / ".dockerignore").read_text().split("\n").count("target") == 1


def test_the_plugin_version_is_the_protocol_the_store_speaks():
    version = _pom().find("m:version", POM_NS).text
    assert version == plugin_version.PLUGIN_VERSION
    descriptor = (PLUGIN / "src/main/plugin-metadata/plugin-descriptor.properties").read_text()
    assert re.search(r"^version=\$\{project\.version\}$", descriptor, re.M)
