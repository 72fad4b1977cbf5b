# sdr-search command line (`sdr ...`) in a slim CPU image.
#
#   docker build -t sdr-search .            (or: docker compose build sdr)
#   docker run --rm sdr-search --help
#
# torch is installed first, on its own layer, from PyTorch's CPU wheel index: the default PyPI wheel
# for Linux pulls several GB of CUDA libraries this image never uses. That index URL is only for
# building this image; the project itself pins torch==2.13.0 in pyproject.toml, which the CPU wheel
# (2.13.0+cpu) satisfies, so `pip install .` does not fetch torch again.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    SDR_CACHE_DIR=/cache

RUN pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu

WORKDIR /app
# Only what the package build needs (see .dockerignore); source changes do not redo the torch layer.
COPY pyproject.toml README.md ./
COPY sdr_search ./sdr_search
COPY sdr_core ./sdr_core
COPY indexer ./indexer
COPY reranker ./reranker
COPY workers ./workers
COPY mappings ./mappings
RUN pip install . \
    && useradd --create-home --uid 1000 sdr \
    && mkdir -p /cache \
    && chown sdr:sdr /cache

USER sdr
VOLUME ["/cache"]
ENTRYPOINT ["sdr"]
CMD ["--help"]
