# Top-level shortcuts (README "Quick start"): `make demo` builds tailprof once (release,
# the versions in Cargo.lock) and runs its demo; `make test` runs every test (what CI
# runs). `make example` records and reports the bundled flat-profile example;
# `make install` puts tailprof in ~/.cargo/bin; `make first-hour` replays the README.
CARGO ?= cargo
PYTEST ?= python3 -m pytest
TAILPROF = $(or $(CARGO_TARGET_DIR),target)/release/tailprof

.PHONY: build demo install example test fuzz bench first-hour clean

build:
	$(CARGO) build --release --locked -p tailprof

demo: build
	$(TAILPROF) demo

install:
	$(CARGO) install --locked --path crates/tailprof-cli

example: build
	$(MAKE) -s -C examples
	$(TAILPROF) record -o split.trace -- examples/build/split
	$(TAILPROF) report split.trace
	$(TAILPROF) info split.trace

# Every suite runs even when an earlier one fails; the exit status is the first failure's.
test:
	@status=0; \
	$(CARGO) test --workspace --no-fail-fast || status=$$?; \
	$(PYTEST) -q -rs python/tests || { r=$$?; [ $$status != 0 ] || status=$$r; }; \
	exit $$status

bench: build
	$(MAKE) -s -C examples
	bench/run.sh

first-hour:
	bench/first-hour.sh

fuzz:
	cd fuzz && $(CARGO) +nightly fuzz run read_trace -- -max_total_time=60

clean:
	$(CARGO) clean
	$(MAKE) -s -C examples clean
