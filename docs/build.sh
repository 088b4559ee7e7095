#!/usr/bin/env bash
# Build the documentation site into site/: redraw the benchmark plot from bench/RESULTS.md, then
# build with mkdocs in strict mode (any warning -- a broken link, a missing page, an API entry
# that does not resolve -- fails the build).
#   pip install -e '.[docs]' && bash docs/build.sh
# Preview while editing: mkdocs serve
set -euo pipefail
cd "$(dirname "$0")/.."
export NO_MKDOCS_2_WARNING=1  # mkdocs-material's notice about MkDocs 2; not a build warning
python bench/plot.py
mkdocs build --strict -d site
