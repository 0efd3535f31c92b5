# joulestep — build, test, bench, demo, install.
# `make deps` installs everything a fresh Debian 12 / Ubuntu machine needs and
# is idempotent; test, bench and demo depend on it.

PREFIX ?= /usr/local
DESTDIR ?=
LIBDIR ?= $(PREFIX)/lib
SLURM_PLUGIN_DIR ?= $(LIBDIR)/slurm
PYTHON ?= python3
VENV ?= $(CURDIR)/.venv
B := build

CC ?= cc
CFLAGS ?= -O2 -g
CFLAGS += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -fPIC -pthread \
          -Iaccounting/include -Ispank/client
LDLIBS_ACCT := -lpowercap -ldl -lpthread
# libpapi is dlopen()ed by the papi backend (see accounting/src/backend_papi.c),
# by the soname of the libpapi.so we compile against; deferred (=) so that it
# is read after `make deps` installed libpapi-dev.
PAPI_SONAME = $(or $(shell objdump -p "$$($(CC) -print-file-name=libpapi.so)" 2>/dev/null | awk '/SONAME/ {print $$2}'),libpapi.so)

DEB_PKGS := build-essential pkg-config libpowercap-dev powercap-utils libpapi-dev \
            papi-tools libjansson-dev libcmocka-dev slurmctld slurmd slurm-client \
            libslurm-dev munge libmunge-dev sqlite3 python3-venv python3-dev util-linux iproute2 procps strace \
            openmpi-bin libopenmpi-dev clang libclang-rt-14-dev \
            debhelper dh-python pybuild-plugin-pyproject python3-setuptools python3-pip rpm \
            python3-click python3-pandas python3-numpy python3-scipy python3-matplotlib \
            postgresql python3-psycopg \
            slurmdbd mariadb-server \
            python3-prometheus-client prometheus groff-base \
            cmake g++ libssl-dev zlib1g-dev libboost-dev \
            libxerces-c-dev xsdcxx libboost-thread-dev libboost-log-dev libboost-filesystem-dev \
            libboost-system-dev libboost-date-time-dev libcppunit-dev libhdf5-openmpi-dev

# The real I/O libraries of the papers' experiments (bench/iolibs/build.sh,
# docs/experiments.md): VELOC 1.8, GenericIO, Damaris 1.7.1, built by
# `make iolibs` (run by `make deps`) from the pinned archives in IOLIBS_SRC
# into $(B)/iolibs/<lib>. A site with its own installs sets VELOC_ROOT,
# GENERICIO_ROOT, DAMARIS_ROOT instead; that library is then not built.
IOLIBS_SRC ?= $(if $(wildcard ../shared/third_party/VELOC-1.8.tar.gz),$(abspath ../shared/third_party))
IOLIBS := $(B)/iolibs
IOLIBS_WANT := $(if $(VELOC_ROOT),,veloc) $(if $(GENERICIO_ROOT),,genericio) $(if $(DAMARIS_ROOT),,damaris)
VELOC_DIR := $(or $(VELOC_ROOT),$(IOLIBS)/veloc)
GENERICIO_DIR := $(or $(GENERICIO_ROOT),$(IOLIBS)/genericio)
DAMARIS_DIR := $(or $(DAMARIS_ROOT),$(IOLIBS)/damaris)
HDF5_MPI := /usr/lib/x86_64-linux-gnu/hdf5/openmpi
# the benchmarks on the real libraries, where they are installed (looked for
# by a sub-make, so that the ones `make deps` just built are found)
IOLIBS_BENCH = $(if $(wildcard $(VELOC_DIR)/include/veloc.h),$(B)/bench/js-ckpt-veloc) \
               $(if $(wildcard $(GENERICIO_DIR)/include/GenericIO.h),$(B)/bench/js-ckpt-gio) \
               $(if $(wildcard $(DAMARIS_DIR)/include/Damaris.h),$(B)/bench/js-damaris-real)

ACCT_SRC := $(wildcard accounting/src/*.c)
ACCT_OBJ := $(ACCT_SRC:%.c=$(B)/obj/%.o)
ACCT_LIB := $(B)/lib/libjoulestep-acct.a
TOOL_SRC := $(wildcard accounting/tools/*.c)
TOOLS := $(patsubst accounting/tools/%.c,$(B)/bin/%,$(TOOL_SRC))
SPANK_SRC := $(wildcard spank/*.c)
SPANK_OBJ := $(SPANK_SRC:%.c=$(B)/obj/%.o)
SPANK_SO := $(if $(SPANK_SRC),$(B)/spank/joulestep.so)
CLIENT_SRC := $(wildcard spank/client/js_client.c)
CLIENT_SO := $(if $(CLIENT_SRC),$(B)/lib/libjoulestep-client.so)
PHASE_BIN := $(if $(wildcard spank/client/joulestep-phase.c),$(B)/bin/joulestep-phase)
# the plugin's own plugstack parser as a command (joulestep doctor runs it)
CONF_CHECK := $(B)/bin/joulestep-plugstack-check
# --energy-hooks libraries (spank/hooks/): LD_PRELOADed into a step's tasks
# by the plugin. Installed in $(LIBDIR)/joulestep, next to (..) the client
# library they link; the build tree has the same layout. The MPI-IO hook is
# built against the mpi.h of the MPI it is for (Debian's Open MPI by default,
# from `make deps`; another MPI: make MPI_CFLAGS="$$(mpicc -compile_info ...)").
MPI_CFLAGS ?= $(shell mpicc --showme:compile 2>/dev/null || pkg-config --cflags ompi-c 2>/dev/null)
MPI_LDFLAGS ?= $(shell mpicc --showme:link 2>/dev/null || pkg-config --libs ompi-c 2>/dev/null)
HOOK_DIR := $(B)/lib/joulestep
HOOKS := $(HOOK_DIR)/libjoulestep-mpiio.so $(HOOK_DIR)/libjoulestep-veloc.so
# Test doubles of the wrapped libraries and programs using them (tests/hooks/)
HOOKT := $(B)/tests/hooks
# the NVML stand-in (tests/fakehw/gpu): a GPU for machines without one
FAKE_NVML := $(B)/tests/fakehw/libnvidia-ml.so.1 $(B)/tests/fakehw/libamd_smi.so
HOOK_TESTS := $(HOOKT)/libfakempi.so $(HOOKT)/libfakeveloc.so $(HOOKT)/libmpiapp.so \
              $(HOOKT)/prog_mpiio $(HOOKT)/prog_veloc $(HOOKT)/prog_dlopen $(HOOKT)/bench_hooks \
              $(HOOKT)/bench_hooks_ompi $(HOOKT)/prog_hooks_mt \
              $(HOOKT)/libfakeveloc-master.so $(HOOKT)/prog_veloc_master
BENCH_SRC := $(wildcard bench/*.c)
BENCH_BIN := $(patsubst bench/%.c,$(B)/bench/%,$(BENCH_SRC))
# MPI benchmarks (bench/ckpt, bench/damaris; docs/experiments.md), built with
# Open MPI's wrapper from Debian (openmpi-bin, libopenmpi-dev: `make deps`),
# linked to libjoulestep-client (found via $$ORIGIN/../lib).
MPICC ?= mpicc
MPI_BENCH := $(B)/bench/js-ckpt $(B)/bench/js-damaris
UNIT_SRC := $(wildcard tests/unit/test_*.c)
UNIT_BIN := $(patsubst tests/unit/%.c,$(B)/tests/%,$(UNIT_SRC))
HDRS := $(wildcard accounting/include/joulestep/*.h accounting/src/*.h spank/*.h spank/client/*.h)
# fuzz harnesses (see "Fuzzing" below)
FUZZ_CC ?= clang
FUZZ_CC_OK = $(shell command -v $(FUZZ_CC) >/dev/null 2>&1 && echo yes)
FUZZ_CFLAGS := -std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer -Wall -Wextra -Werror \
               -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
               -Ispank -Iaccounting/include -Iaccounting/src -Itests/fuzz
FUZZ_TARGETS := msg conf policy tags tuned auto cpuset jobcache cgroup
FUZZ_BIN := $(FUZZ_TARGETS:%=$(B)/fuzz/fuzz_%)
FUZZ_RUNS ?= 300000
FUZZ_SECONDS ?= 300
fuzz_src_msg := spank/js_parse.c
fuzz_src_conf := spank/js_parse.c
fuzz_src_policy := spank/js_parse.c
fuzz_src_tags := spank/js_parse.c
fuzz_src_tuned := spank/js_parse.c spank/js_tuned.c
fuzz_src_auto := spank/js_parse.c spank/js_tuned.c spank/js_auto.c
fuzz_src_cpuset := accounting/src/freq.c accounting/src/util.c accounting/src/zones.c
fuzz_src_jobcache := spank/js_jobcache_logic.c
fuzz_src_cgroup := accounting/src/cgroup.c accounting/src/freq.c accounting/src/util.c accounting/src/zones.c
fuzz_lib_tuned := -ljansson
fuzz_lib_auto := -ljansson
fuzz_lib_jobcache := -ljansson

# The current Slurm (docs/design.md, "Which Slurm, which configuration"): `make
# slurm-latest` builds it once, from SLURM_SRC checked against SLURM_SHA256
# (tests/cluster/slurm-latest.sh), into $(B)/slurm-latest/ (what the test
# cluster runs: daemons, clients, plugins, headers), and the SPANK plugin
# against its headers into $(B)/slurm-latest/joulestep/joulestep.so (a plugin
# is built for the Slurm release that loads it). `make test-slurm-latest`:
# the site tests (pytest -m site) on it, in the cgroup configuration.
# SLURM_INCLUDE=DIR builds everything against the Slurm headers in DIR
# (DIR/slurm/spank.h) instead of the system's (libslurm-dev). SLURM_SRC: by
# default the archive beside the I/O libraries' (IOLIBS_SRC).
SLURM_SRC ?= $(if $(IOLIBS_SRC),$(IOLIBS_SRC)/slurm-26.05.3.tar.gz)
SLURM_SHA256 ?= fcba0e3c4819db4ec77059a5db41803db61b83f5dd1afcb4122c838cc70694f4
SLURM_LATEST := $(B)/slurm-latest
SLURM_LATEST_SO := $(SLURM_LATEST)/joulestep/joulestep.so
SLURM_INCLUDE ?=
CFLAGS += $(if $(SLURM_INCLUDE),-I$(SLURM_INCLUDE))

# what `make install` installs, and all it builds: no unit tests (cmocka),
# benchmarks or MPI programs (mpicc), hook test doubles or fuzzers
SHIPPED := $(ACCT_LIB) $(TOOLS) $(SPANK_SO) $(CLIENT_SO) $(PHASE_BIN) $(CONF_CHECK) $(HOOKS)

.PHONY: all iolibs-bench deps test test-unit test-py test-fuzz fuzz fuzz-build bench demo install clean deb rpm-check
.PHONY: slurm-latest test-slurm-latest
all: $(SHIPPED) $(UNIT_BIN) $(BENCH_BIN) \
     $(MPI_BENCH) $(HOOKS) $(HOOK_TESTS) $(FAKE_NVML) $(if $(FUZZ_CC_OK),$(FUZZ_BIN)) iolibs-bench

$(B)/obj/%.o: %.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(B)/obj/accounting/src/backend_papi.o: CFLAGS += -DJS_PAPI_SONAME='"$(PAPI_SONAME)"'

$(ACCT_LIB): $(ACCT_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(B)/bin/%: accounting/tools/%.c $(ACCT_LIB) $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@ $(ACCT_LIB) $(LDLIBS_ACCT) -ljansson

$(B)/spank/joulestep.so: $(SPANK_OBJ) $(ACCT_LIB) spank/joulestep.map
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -shared -Wl,--version-script=spank/joulestep.map -Wl,-z,defs \
	  $(SPANK_OBJ) $(ACCT_LIB) -o $@ $(LDLIBS_ACCT) -ljansson

$(B)/lib/libjoulestep-client.so: spank/client/js_client.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -shared -Wl,-soname,libjoulestep-client.so.1 \
	  -Wl,--version-script=spank/client/client.map $< -o $@
	ln -sf libjoulestep-client.so $(B)/lib/libjoulestep-client.so.1

$(CONF_CHECK): spank/tools/joulestep-plugstack-check.c spank/js_parse.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Ispank $< spank/js_parse.c -o $@ -lm

$(B)/bin/joulestep-phase: spank/client/joulestep-phase.c $(CLIENT_SO)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@ -L$(B)/lib -ljoulestep-client -Wl,-rpath,'$$ORIGIN/../lib'

$(HOOK_DIR)/libjoulestep-%.so: spank/hooks/%.c spank/hooks/js_hook.c spank/hooks/%.map $(CLIENT_SO) $(HDRS) spank/hooks/js_hook.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(if $(filter mpiio,$*),$(MPI_CFLAGS)) -fvisibility=hidden -shared \
	  -Wl,--version-script=spank/hooks/$*.map -Wl,-z,defs $< spank/hooks/js_hook.c -o $@ \
	  -L$(B)/lib -ljoulestep-client -Wl,-rpath,'$$ORIGIN/..' -ldl

$(B)/tests/fakehw/libnvidia-ml.so.1: tests/fakehw/gpu/fake_nvml.c tests/fakehw/gpu/fake_model.c tests/fakehw/gpu/fake_model.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -shared -Wl,-soname,libnvidia-ml.so.1 $(filter %.c,$^) -o $@
$(B)/tests/fakehw/libamd_smi.so: tests/fakehw/gpu/fake_amdsmi.c tests/fakehw/gpu/fake_model.c tests/fakehw/gpu/fake_model.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -shared -Wl,-soname,libamd_smi.so $(filter %.c,$^) -o $@

# fakes: no mpi.h (they define Open MPI's predefined handles as plain objects)
$(HOOKT)/libfake%.so: tests/hooks/fake_%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -shared $< -o $@
$(HOOKT)/libmpiapp.so: tests/hooks/mpiapp.c $(HOOKT)/libfakempi.so
	$(CC) $(CFLAGS) $(MPI_CFLAGS) -shared $< -o $@ -L$(HOOKT) -lfakempi -Wl,-rpath,'$$ORIGIN'
$(HOOKT)/prog_mpiio: tests/hooks/prog_mpiio.c $(HOOKT)/libfakempi.so
	$(CC) $(CFLAGS) $(MPI_CFLAGS) $< -o $@ -L$(HOOKT) -lfakempi -Wl,-rpath,'$$ORIGIN'
$(HOOKT)/prog_veloc: tests/hooks/prog_veloc.c $(HOOKT)/libfakeveloc.so
	$(CC) $(CFLAGS) $< -o $@ -L$(HOOKT) -lfakeveloc -Wl,-rpath,'$$ORIGIN'
$(HOOKT)/prog_hooks_mt: tests/hooks/prog_hooks_mt.c $(HOOKT)/libfakempi.so $(HOOKT)/libfakeveloc.so
	$(CC) $(CFLAGS) $(MPI_CFLAGS) $< -o $@ -L$(HOOKT) -lfakempi -lfakeveloc -Wl,-rpath,'$$ORIGIN'
$(HOOKT)/libfakeveloc-master.so: tests/hooks/fake_veloc.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DFAKE_VELOC_MASTER -shared $< -o $@
$(HOOKT)/prog_veloc_master: tests/hooks/prog_veloc_master.c $(HOOKT)/libfakeveloc-master.so $(CLIENT_SO)
	$(CC) $(CFLAGS) $< -o $@ -L$(HOOKT) -lfakeveloc-master -L$(B)/lib -ljoulestep-client \
	  -Wl,-rpath,'$$ORIGIN' -Wl,-rpath,'$$ORIGIN/../../lib'
$(HOOKT)/prog_dlopen: tests/hooks/prog_dlopen.c
	$(CC) $(CFLAGS) $< -o $@ -ldl
$(HOOKT)/bench_hooks: bench/hooks/bench_hooks.c $(HOOKT)/libfakempi.so $(HOOKT)/libfakeveloc.so
	$(CC) $(CFLAGS) $(MPI_CFLAGS) $< -o $@ -L$(HOOKT) -lfakempi -lfakeveloc -Wl,-rpath,'$$ORIGIN'
$(HOOKT)/bench_hooks_ompi: bench/hooks/bench_hooks.c
	$(CC) $(CFLAGS) $(MPI_CFLAGS) -DBENCH_REAL_MPI $< -o $@ $(MPI_LDFLAGS)

# the plugin's side-channel limits (spank/js_sidechan.c, docs/security.md)
$(B)/tests/test_sidechan: tests/unit/test_sidechan.c spank/js_sidechan.c spank/js_parse.c spank/js_sidechan.h spank/js_parse.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Ispank $< spank/js_sidechan.c spank/js_parse.c -o $@ -lcmocka -lm

# the plugin's shared-node inputs (spank/js_share.c)
$(B)/tests/test_share: tests/unit/test_share.c spank/js_share.c spank/js_share.h $(ACCT_LIB) $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Ispank $< spank/js_share.c -o $@ $(ACCT_LIB) $(LDLIBS_ACCT) -lcmocka

# the record module's JSON from a step's state (spank/js_record.c), with
# the plugin modules it calls
REC_SRC := spank/js_record.c spank/js_gpu_step.c spank/js_step.c spank/js_pending.c \
           spank/js_parse.c spank/js_phase.c spank/js_hooks.c spank/js_sidechan.c \
           spank/js_jobcache.c spank/js_jobcache_logic.c spank/js_cgroup_step.c \
           spank/js_auto_step.c spank/js_auto.c spank/js_tuned.c
$(B)/tests/test_record: tests/unit/test_record.c $(REC_SRC) $(ACCT_LIB) $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Ispank $< $(REC_SRC) -o $@ $(ACCT_LIB) $(LDLIBS_ACCT) -lcmocka -ljansson -lm

# the job prolog's and epilog's clock recovery (spank/js_cpu_step.c,
# spank/js_uncore_step.c)
RECOVER_SRC := spank/js_cpu_step.c spank/js_uncore_step.c spank/js_step.c spank/js_parse.c \
               spank/js_cgroup_step.c
$(B)/tests/test_recover: tests/unit/test_recover.c $(RECOVER_SRC) $(ACCT_LIB) $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Ispank $< $(RECOVER_SRC) -o $@ $(ACCT_LIB) $(LDLIBS_ACCT) -lcmocka -ljansson -lm

# the hooks' option logic is the plugin's (spank/js_hooks.c)
$(B)/tests/test_hooks: tests/unit/test_hooks.c spank/js_hooks.c spank/js_hooks.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Ispank $< spank/js_hooks.c -o $@ -lcmocka

# the GPU meter's tests load the NVML stand-in beside them
$(B)/tests/test_gpu_meter: $(B)/tests/fakehw/libnvidia-ml.so.1
$(B)/tests/test_gpu_journal: $(B)/tests/fakehw/libnvidia-ml.so.1 $(B)/tests/fakehw/libamd_smi.so

$(B)/tests/%: tests/unit/%.c $(ACCT_LIB) $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Iaccounting/src $< -o $@ $(ACCT_LIB) $(LDLIBS_ACCT) -lcmocka -ljansson

# the plugin's phase bookkeeping alone (spank/js_phase.c; issue 23, defect 7)
$(B)/bench/bench_phase: bench/bench_phase.c spank/js_phase.c spank/js_phase.h spank/js_parse.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Ispank $< spank/js_phase.c -o $@

# the phase logic with the GPU meter and clock locks on the NVML stand-in
$(B)/bench/bench_gpu_phase: bench/bench_gpu_phase.c spank/js_phase.c spank/js_phase.h spank/js_parse.h $(ACCT_LIB) $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Ispank -Iaccounting/src $< spank/js_phase.c -o $@ $(ACCT_LIB) $(LDLIBS_ACCT)

$(B)/bench/%: bench/%.c $(ACCT_LIB) $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Iaccounting/src $< -o $@ $(ACCT_LIB) $(LDLIBS_ACCT) -ljansson

$(B)/bench/js-ckpt: bench/ckpt/ckpt.c
$(B)/bench/js-damaris: bench/damaris/damaris.c
$(MPI_BENCH): bench/common/jsbench.h $(CLIENT_SO) $(HDRS)
	@mkdir -p $(dir $@)
	@command -v $(MPICC) >/dev/null || { echo "$(MPICC) not found: run make deps (openmpi)"; exit 1; }
	OMPI_CC=$(CC) $(MPICC) $(CFLAGS) -Ibench/common $(filter %.c,$^) -o $@ -L$(B)/lib -ljoulestep-client \
	  -Wl,-rpath,'$$ORIGIN/../lib' -lm

iolibs-bench: $(CLIENT_SO)
	@$(MAKE) --no-print-directory iolibs-bench-build
.PHONY: iolibs-bench-build
iolibs-bench-build: $(IOLIBS_BENCH)
	@$(if $(strip $(IOLIBS_BENCH)),:,echo "iolibs: no VELOC, GenericIO or Damaris install: the experiments run the imitations only")
VELOC_LIB = $(if $(wildcard $(VELOC_DIR)/lib64/libveloc-client.so),$(VELOC_DIR)/lib64,$(VELOC_DIR)/lib)
$(B)/bench/js-ckpt-veloc: bench/ckpt/ckpt_veloc.c bench/common/jsbench.h $(CLIENT_SO) $(VELOC_DIR)/include/veloc.h \
                         bench/iolibs/veloc-backend-stop.sh
	@mkdir -p $(dir $@)
	install -m 0755 bench/iolibs/veloc-backend-stop.sh $(B)/bench/
	OMPI_CC=$(CC) $(MPICC) $(CFLAGS) -Ibench/common $< -o $@ -L$(B)/lib -ljoulestep-client \
	  -L$(VELOC_LIB) -lveloc-client -Wl,-rpath,'$$ORIGIN/../lib' -Wl,-rpath,$(abspath $(VELOC_LIB))
$(B)/bench/js-ckpt-gio: bench/ckpt/ckpt_gio.cxx $(CLIENT_SO) $(GENERICIO_DIR)/include/GenericIO.h
	@mkdir -p $(dir $@)
	mpicxx -O2 -g -Wall -Werror -fopenmp -I$(GENERICIO_DIR)/include -Ispank/client $< -o $@ \
	  $(GENERICIO_DIR)/lib/libGenericIO.a -L$(B)/lib -ljoulestep-client -Wl,-rpath,'$$ORIGIN/../lib'

# Damaris installs a static library only, and its damaris.pc gives unusable
# -lBoost::thread flags: linked by hand (C++ runtime: mpicxx links)
$(B)/bench/js-damaris-real: bench/damaris/damaris_real.c bench/common/jsbench.h $(CLIENT_SO) $(DAMARIS_DIR)/include/Damaris.h
	@mkdir -p $(dir $@)
	OMPI_CC=$(CC) $(MPICC) $(CFLAGS) -Ibench/common -I$(DAMARIS_DIR)/include -I$(HDF5_MPI)/include \
	  -c $< -o $(B)/bench/damaris_real.o
	mpicxx $(B)/bench/damaris_real.o -o $@ $(DAMARIS_DIR)/lib/libdamaris.a -lxerces-c \
	  -lboost_log_setup -lboost_log -lboost_thread -lboost_filesystem -lboost_system -lboost_date_time \
	  -L$(HDF5_MPI)/lib -lhdf5 -lrt -ldl -lpthread -L$(B)/lib -ljoulestep-client -Wl,-rpath,'$$ORIGIN/../lib'

# ---------------------------------------------------------------------------
# Fuzzing (docs/reliability.md, "Fuzzing"): libFuzzer harnesses under ASan and
# UBSan, built with clang (Debian's clang + libclang-rt-14-dev: `make deps`)
# into build/fuzz/, only when clang is present. `make test` runs each target
# for FUZZ_RUNS inputs (fixed seed); `make fuzz` for FUZZ_SECONDS each.

.SECONDEXPANSION:
$(B)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz.h $$(fuzz_src_$$*) $(HDRS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $< $(fuzz_src_$*) -o $@ $(fuzz_lib_$*) -lm

fuzz-build:
	@if [ -z "$(FUZZ_CC_OK)" ]; then echo "fuzz: $(FUZZ_CC) not found: run make deps"; exit 1; fi
	@$(MAKE) --no-print-directory $(FUZZ_BIN)

# short: part of `make test`; fails on a crash, a leak or a broken contract
test-fuzz: fuzz-build
	@tests/fuzz/run.sh -runs=$(FUZZ_RUNS) $(FUZZ_TARGETS)

fuzz: deps fuzz-build
	@tests/fuzz/run.sh -max_total_time=$(FUZZ_SECONDS) $(FUZZ_TARGETS)
	JS_FUZZ_SECONDS=$(FUZZ_SECONDS) $(VENV)/bin/python -m pytest -q -s tests/fuzz

# ---------------------------------------------------------------------------
deps: $(B)/.deps-ok $(IOLIBS)/.ok
$(B)/.deps-ok: Makefile cli/pyproject.toml bench/dump/requirements.txt
	@missing=""; for p in $(DEB_PKGS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "deps: installing$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; \
	fi
	@[ -x $(VENV)/bin/python ] || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -e 'cli[test]'
	bench/dump/venv.sh $(B)/dump-venv  # the dump jobs' Python (SZ3, ZFP): any user may run it
	@mkdir -p $(B) && touch $@

# build.sh skips a library whose archives and patches are unchanged since it
# was built (sha256 stamps); it never fails `make deps`.
.PHONY: iolibs
iolibs: $(B)/.deps-ok
	@rm -f $(IOLIBS)/.ok && $(MAKE) --no-print-directory $(IOLIBS)/.ok
$(IOLIBS)/.ok: bench/iolibs/build.sh bench/iolibs/SHA256SUMS $(wildcard bench/iolibs/patches/*.patch) | $(B)/.deps-ok
	@mkdir -p $(IOLIBS)
	@if [ -z "$(strip $(IOLIBS_WANT))" ]; then echo "iolibs: using VELOC_ROOT, GENERICIO_ROOT, DAMARIS_ROOT"; \
	elif [ -z "$(IOLIBS_SRC)" ]; then \
	  echo "iolibs: no IOLIBS_SRC (archives of bench/iolibs/SHA256SUMS) nor *_ROOT: the experiments use the imitations"; \
	else bench/iolibs/build.sh "$(IOLIBS_SRC)" $(IOLIBS) $(IOLIBS_WANT) || true; fi
	@touch $@

# `make test` also runs the site tests on the current Slurm where its source
# archive is at hand (SLURM_SRC): built once (about 4 CPU-minutes), so the
# README's one test command covers both Slurm releases (docs/design.md,
# "Which Slurm, which configuration").
# The current Slurm first: built, its site tests run, and then the main
# suite also checks what needs its build (Debian's Slurm refusing the other
# release's plugin, the .deb pin from its headers) instead of skipping it.
test: deps all
	$(MAKE) --no-print-directory test-unit
	$(MAKE) --no-print-directory test-fuzz
	$(if $(wildcard $(SLURM_SRC)),$(MAKE) --no-print-directory test-slurm-latest,@echo "test: no SLURM_SRC archive: the site tests on the current Slurm are not run")
	$(MAKE) --no-print-directory test-py

slurm-latest: $(ACCT_LIB)
	@tests/cluster/slurm-latest.sh "$(SLURM_SRC)" $(SLURM_SHA256) $(SLURM_LATEST)
	@$(MAKE) --no-print-directory $(SLURM_LATEST_SO)

$(SLURM_LATEST_SO): $(SPANK_SRC) $(ACCT_LIB) spank/joulestep.map $(HDRS) $(SLURM_LATEST)/.ok
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I$(SLURM_LATEST)/include -shared -Wl,--version-script=spank/joulestep.map \
	  -Wl,-z,defs $(SPANK_SRC) $(ACCT_LIB) -o $@ $(LDLIBS_ACCT) -ljansson

test-slurm-latest: deps all slurm-latest
	JOULESTEP_SLURM_PREFIX=$(abspath $(SLURM_LATEST)) JOULESTEP_CLUSTER_CONFIGS=cgroup \
	  $(VENV)/bin/python -m pytest -ra -m site tests/cluster $(PYTEST_ARGS)

test-unit: $(UNIT_BIN)
	@rc=0; for t in $(UNIT_BIN); do echo "== $$t"; $$t || rc=1; done; exit $$rc

test-py:
	$(VENV)/bin/python -m pytest -ra tests $(PYTEST_ARGS)

bench: deps all
	$(VENV)/bin/python bench/run.py

demo: deps all
	$(VENV)/bin/python demo/demo.py

install: $(SHIPPED)
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(PREFIX)/bin \
	  $(DESTDIR)$(PREFIX)/include/joulestep $(DESTDIR)$(SLURM_PLUGIN_DIR)
	install -m 0644 accounting/include/joulestep/*.h $(DESTDIR)$(PREFIX)/include/joulestep/
	install -m 0644 $(ACCT_LIB) $(DESTDIR)$(LIBDIR)/
	install -m 0755 $(TOOLS) $(PHASE_BIN) $(CONF_CHECK) $(DESTDIR)$(PREFIX)/bin/
	$(if $(SPANK_SO),install -m 0755 $(SPANK_SO) $(DESTDIR)$(SLURM_PLUGIN_DIR)/)
	$(if $(CLIENT_SO),install -m 0755 $(CLIENT_SO) $(DESTDIR)$(LIBDIR)/libjoulestep-client.so.1 && \
	  ln -sf libjoulestep-client.so.1 $(DESTDIR)$(LIBDIR)/libjoulestep-client.so && \
	  install -m 0644 spank/client/joulestep/*.h $(DESTDIR)$(PREFIX)/include/joulestep/)
	install -d -m 0755 $(DESTDIR)$(LIBDIR)/joulestep
	install -m 0755 $(HOOKS) $(DESTDIR)$(LIBDIR)/joulestep/
	install -d $(DESTDIR)$(PREFIX)/share/man/man8 $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 0644 docs/joulestep-spank.8 docs/joulestep-restore.8 docs/joulestep-plugstack-check.8 \
	  $(DESTDIR)$(PREFIX)/share/man/man8/
	install -m 0644 docs/joulestep-phase.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	for pc in etc/pkgconfig/*.pc.in; do \
	  sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' $$pc \
	    > $(DESTDIR)$(LIBDIR)/pkgconfig/$$(basename $$pc .in); done

# ---------------------------------------------------------------------------
# Packages (docs/admin-guide.md, "Packages"), built from a tarball of the
# working tree (packaging/srctar.sh), never in it, with Debian's own tools and
# Python (PATH=SYS_PATH: no venv, no /usr/local Python).
# `make deb`: debian/ with debhelper; the .debs land in build/deb/current/.
# The tarball's checksum keys the build, so unchanged sources are not built
# twice. `make rpm-check`: packaging/rpm/joulestep.spec through `rpmspec -P`
# and `rpmbuild -bs` (the source RPM lands in build/rpm/SRPMS/).
VERSION = $(shell sed -n 's/^version = "\(.*\)"/\1/p' cli/pyproject.toml)
SYS_PATH := /usr/sbin:/usr/bin:/sbin:/bin
DEB_DIR := $(B)/deb
RPM_DIR := $(B)/rpm

deb:
	@packaging/srctar.sh $(DEB_DIR)/src.tar.gz joulestep-$(VERSION)
	@key=$$(sha256sum $(DEB_DIR)/src.tar.gz | cut -c1-16); d=$(DEB_DIR)/$$key; \
	if [ -e $$d/ok ]; then ln -sfn $$key $(DEB_DIR)/current; echo "deb: $$d (unchanged sources)"; exit 0; fi; \
	rm -rf $$d && mkdir -p $$d && tar -xzf $(DEB_DIR)/src.tar.gz -C $$d && \
	echo "deb: building in $$d (log: $$d/build.log)" && \
	if ! (cd $$d/joulestep-$(VERSION) && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL PATH=$(SYS_PATH) \
	      DEB_BUILD_OPTIONS="parallel=$$(nproc) $$DEB_BUILD_OPTIONS" \
	      dpkg-buildpackage -b -us -uc) > $$d/build.log 2>&1; then tail -n 40 $$d/build.log; exit 1; fi; \
	rm -rf $$d/joulestep-$(VERSION) && touch $$d/ok && \
	for x in $(DEB_DIR)/*; do [ -L $$x ] || [ ! -d $$x ] || [ $$x = $$d ] || rm -rf $$x; done; \
	ln -sfn $$key $(DEB_DIR)/current && ls $$d/*.deb

rpm-check:
	rm -rf $(RPM_DIR) && mkdir -p $(RPM_DIR)/SOURCES
	packaging/srctar.sh $(RPM_DIR)/SOURCES/joulestep-$(VERSION).tar.gz joulestep-$(VERSION)
	PATH=$(SYS_PATH) rpmspec -P packaging/rpm/joulestep.spec > $(RPM_DIR)/joulestep.spec.parsed
	PATH=$(SYS_PATH) rpmbuild -bs --define '_topdir $(abspath $(RPM_DIR))' packaging/rpm/joulestep.spec

clean:
	rm -rf $(B)
