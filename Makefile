# Quick start:  make investigate   (sets up .venv, runs the dsv4-flash investigation on this machine)
#               make test          (sets up .venv, runs the whole test suite; what .ci/run runs)
#               make test-quick    (the tests not marked slow: the inner loop, a few minutes)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TARGET ?= dsv4-flash
DECIDE ?= auto

# pytest-xdist workers (tests/conftest.py says how the suite is laid out over them); PYTEST_ARGS adds arguments
TEST_WORKERS ?= 2
PYTEST_ARGS ?=
PYTEST := $(PY) -m pytest -q -n $(TEST_WORKERS)

.PHONY: setup setup-ssh-tests setup-browser-tests investigate test test-quick sm120-compile
setup: $(VENV)/.installed .cache/sglang-0.5.17/.complete

# sglang 0.5.17, the release the H200's real server runs (issue #34), beside the installed 0.5.23: its wheel's
# Python source and its pins of what its server arguments import, into .cache/ (git-ignored), never the venv;
# the adapter reads it with --release (tools/engines/sglang/release.py), docs/sglang-0.5.17-vs-0.5.23.md from it.
.cache/sglang-0.5.17/.complete: $(VENV)/.installed scripts/real_sglang/source.py
	$(PY) -m scripts.real_sglang.source

# torch is pinned to the CPU build that lies on this kind of machine (an unpinned torch pulls a
# multi-GB CUDA build); sglang comes without its dependencies: only its source is needed here.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --no-compile torch==2.13.0
	$(PY) -m pip install -q --no-compile -e '.[box,test]'
	$(PY) -m pip install -q --no-compile --no-deps sglang==0.5.23
	touch $@

investigate: setup
	$(PY) -m agent investigate $(TARGET) --decide $(DECIDE)

# The SSH box's tests run a real sshd on loopback as box users of their own (scripts/sshd_harness.py):
# Debian's openssh-server and acl (to deny those users the checkout), binutils (the box demangles its traces'
# kernel names with c++filt into the bench result: tools/trace/kernel_names.py; a fresh Debian lacks it), and the
# users' Python environments, built once into /var/cache/perf-investigator/box-envs (a few minutes the first time).
setup-ssh-tests: setup
	@if [ "$$(id -u)" != 0 ]; then echo "setup-ssh-tests: not root, so no sshd or box users: the SSH box's tests will skip"; \
	else \
		{ test -x /usr/sbin/sshd && test -x /usr/bin/setfacl && test -x /usr/bin/ssh-agent && test -x /usr/bin/c++filt && /usr/bin/python3 -c "import ensurepip"; } || \
		{ apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q openssh-server openssh-client acl binutils python3-venv; } && \
		$(PY) -m scripts.sshd_harness envs; \
	fi

# The HTML report's test (tests/test_html_report.py) opens it in a real headless browser: Debian's
# chromium-headless-shell, chromium without its desktop parts (about 100 MB, some 35 s with apt-get update).
# The lists apt already has are tried first; an update only when they cannot find it.
setup-browser-tests:
	@if [ "$$(id -u)" != 0 ]; then echo "setup-browser-tests: not root, so no chromium: the HTML report's browser test will skip"; \
	else \
		command -v chromium-headless-shell >/dev/null || command -v chromium >/dev/null || \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium-headless-shell || \
		{ apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium-headless-shell; }; \
	fi

test: setup setup-ssh-tests setup-browser-tests
	$(PYTEST) $(PYTEST_ARGS)

test-quick: setup
	$(PYTEST) -m "not slow" $(PYTEST_ARGS)

# The sm_120 split-K family's ahead-of-time compile for sm_120 under both Tritons it must build with: this
# venv's (3.9, CI's) and 3.6 (the H200 image's), the latter in a venv of its own (torch's CPU build and the
# triton 3.6.0 wheel, which carries its ptxas). No GPU. Writes benchmarks/results/sm120-20261205/.
SM120_OUT ?= benchmarks/results/sm120-20261205
VENV36 ?= .venv-triton36
$(VENV36)/.installed:
	$(PYTHON) -m venv $(VENV36)
	$(VENV36)/bin/python -m pip install -q --upgrade pip
	$(VENV36)/bin/python -m pip install -q torch==2.13.0 triton==3.6.0 numpy
	touch $@

sm120-compile: setup $(VENV36)/.installed
	$(PY) -m scripts.sm120_splitk_compile $(SM120_OUT)/sm120_compile_triton39.json
	$(VENV36)/bin/python -m scripts.sm120_splitk_compile $(SM120_OUT)/sm120_compile_triton36.json
	$(PY) -m scripts.sm120_splitk_compile --compare $(SM120_OUT)/sm120_vs_sm90_triton39.json
