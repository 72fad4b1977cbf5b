"""The service's OpenAPI spec, as committed in ``openapi.json`` at the repository root.

``python -m sdr_search.reranker.service.openapi > openapi.json`` regenerates it; a test checks the committed file
equals :func:`openapi_json`. The spec does not depend on settings or the environment.
"""

from __future__ import annotations

import json
import sys
from typing import Any

__all__ = ["openapi_spec", "openapi_json", "main"]


def openapi_spec() -> dict[str, Any]:
    from .app import create_app
    from .settings import ServiceSettings

    return create_app(stores={}, encoder=None, settings=ServiceSettings.model_construct()).openapi()


def openapi_json() -> str:
    return json.dumps(openapi_spec(), indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    sys.stdout.write(openapi_json())
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
