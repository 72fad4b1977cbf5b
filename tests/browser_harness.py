"""A real headless browser for the /ui page's tests: Debian's ``chromium`` driven by Selenium through
Debian's ``chromium-driver`` (the two come from one source package, so their versions always
agree; Selenium's own driver download is never used). ``.ci/run`` and ``scripts/setup.sh`` install
both. A browser that cannot start fails the test that needs it, with the reason: never a skip.

- :func:`start_chromium`: a headless chromium with the browser console recorded;
- :func:`console_problems`: the console's errors (script errors, ``console.error``, failed loads);
- :func:`screenshot`: a PNG per view under ``runs/test-artifacts/ui/`` (git-ignored), and the README's
  views also under ``$SDR_UI_SCREENSHOTS`` when set (``docs/images``: the tour's pictures, from the same test).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path
from typing import Any, Callable

import pytest

__all__ = ["ARTIFACTS", "chromium_paths", "start_chromium", "console_problems", "screenshot", "wait_for"]

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "runs" / "test-artifacts" / "ui"
WINDOW = (1360, 860)


def chromium_paths() -> tuple[str | None, str | None]:
    """The browser and its driver: ``SDR_CHROMIUM`` / ``SDR_CHROMEDRIVER``, else on PATH (Debian's
    ``chromium`` and ``chromium-driver`` packages)."""
    browser = os.environ.get("SDR_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    driver = os.environ.get("SDR_CHROMEDRIVER") or shutil.which("chromedriver")
    return browser, driver


def start_chromium():
    """A headless chromium (Selenium WebDriver) with the console log recorded; fails the calling test
    with what to install when there is none."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.fail("selenium is not installed: scripts/setup.sh installs the test extra (pip install -e '.[test]')",
                    pytrace=False)
    browser, driver = chromium_paths()
    if not browser or not driver:
        pytest.fail("no headless browser for the /ui tests: install Debian's chromium and chromium-driver "
                    "(apt-get install -y chromium chromium-driver; scripts/setup.sh does when it can), or set "
                    f"SDR_CHROMIUM and SDR_CHROMEDRIVER (found: chromium={browser}, chromedriver={driver})", pytrace=False)
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={WINDOW[0]},{WINDOW[1]}", "--force-device-scale-factor=1", "--hide-scrollbars",
                "--disable-extensions", "--no-first-run", "--disable-background-networking", "--lang=en-US"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    try:
        return webdriver.Chrome(options=options, service=Service(driver))
    except Exception as e:  # a browser that does not start fails the test with the reason
        pytest.fail(f"chromium ({browser}) with chromedriver ({driver}) did not start: {e}", pytrace=False)


def console_problems(driver, *, expected_statuses: tuple[int, ...] = ()) -> list[str]:
    """The browser console's errors since the last call: script errors and ``console.error`` always;
    failed loads unless of an HTTP status in ``expected_statuses`` (an API error a test provokes,
    which the browser reports as a failed load)."""
    problems = []
    for entry in driver.get_log("browser"):
        if entry["level"] not in ("SEVERE", "ERROR"):
            continue
        message = entry["message"]
        status = re.search(r"status of (\d{3})", message)
        if entry.get("source") == "network" and status and int(status.group(1)) in expected_statuses:
            continue
        problems.append(f"{entry.get('source')}: {message}")
    return problems


def screenshot(driver, name: str, *, readme: bool = True) -> Path:
    """The window as ``<name>.png`` under :data:`ARTIFACTS`; a ``readme`` view also as ``ui-<name>.png``
    under ``$SDR_UI_SCREENSHOTS`` when set (relative to the repository root; ``docs/images`` for the
    README's tour)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    png = driver.get_screenshot_as_png()
    path = ARTIFACTS / f"{name}.png"
    path.write_bytes(png)
    extra = os.environ.get("SDR_UI_SCREENSHOTS")
    if extra and readme:
        folder = Path(extra) if Path(extra).is_absolute() else ROOT / extra
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"ui-{name}.png").write_bytes(png)
    return path


def wait_for(what: str, check: Callable[[], Any], timeout: float = 30.0, driver=None) -> Any:
    """``check()``'s first truthy value, polled; fails with ``what`` (and the page's error banner,
    when a driver is given) after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except Exception as e:  # a stale element while the page re-renders: poll again
            value, last = None, e
        else:
            last = None
        if value:
            return value
        if time.monotonic() > deadline:
            shown = ""
            if driver is not None:
                shown = driver.execute_script(
                    "const e = document.querySelector('#error'); return e && !e.hidden ? e.textContent : '';")
            pytest.fail(f"timed out waiting for {what}" + (f"; the page shows: {shown.strip()}" if shown else "")
                        + (f"; last error: {last}" if last else ""), pytrace=False)
        time.sleep(0.05)
