# Top-level shortcuts. `make example` records and reports the bundled example;
# `make test` runs every test (what CI runs).
CARGO ?= cargo
PYTEST ?= python3 -m pytest

.PHONY: build example test fuzz bench clean

build:
	$(CARGO) build --release

example: build
	$(MAKE) -s -C examples
	./target/release/tailprof record -o split.trace -- examples/build/split
	./target/release/tailprof report split.trace
	./target/release/tailprof info split.trace

# Every suite runs even when an earlier one fails; the exit status is the first failure's.
test:
	@status=0; \
	$(CARGO) test --workspace --no-fail-fast || status=$$?; \
	$(PYTEST) -q -rs python/tests || { r=$$?; [ $$status != 0 ] || status=$$r; }; \
	exit $$status

bench: build
	$(MAKE) -s -C examples
	bench/run.sh

fuzz:
	cd fuzz && $(CARGO) +nightly fuzz run read_trace -- -max_total_time=60

clean:
	$(CARGO) clean
	$(MAKE) -s -C examples clean
