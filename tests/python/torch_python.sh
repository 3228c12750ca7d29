#!/bin/sh
# SPDX-License-Identifier: MIT
# torch_python.sh ARGS...: the python the torch tests use (ARCOMM_TEST_PYTHON, else
# python3 on PATH), so that a test line names one program whichever python has torch.
exec "${ARCOMM_TEST_PYTHON:-python3}" "$@"
