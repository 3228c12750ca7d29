#!/bin/sh
# SPDX-License-Identifier: MIT
# run.sh BUILD_DIR [PYTEST ARGS...]: the Python package's tests (tools/python, from the
# source tree) against BUILD_DIR's libarcomm, with Debian's python3 (ARCOMM_TEST_PYTHON
# overrides it).  Exit 77 (skipped) where that python lacks numpy or pytest.
py=${ARCOMM_TEST_PYTHON:-/usr/bin/python3}
[ -x "$py" ] || py=$(command -v python3)
if ! "$py" -c "import numpy, pytest" 2>/dev/null; then
    echo "python: $py has no numpy or pytest: skipped"
    exit 77
fi
build=$(cd "$1" && pwd)
shift
ARCOMM_TEST_BUILD_DIR=$build
ARCOMM_LIBRARY=$build/libarcomm.so
PYTHONDONTWRITEBYTECODE=1
export ARCOMM_TEST_BUILD_DIR ARCOMM_LIBRARY PYTHONDONTWRITEBYTECODE
cd "$(dirname "$0")" || exit 1
exec "$py" -m pytest -q -p no:cacheprovider -rfEs "$@"
