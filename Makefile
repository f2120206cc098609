# coven: build, install, test, benchmarks, completions, docs. GNU make.
#
#   make                  release build (.build/release/coven)
#   make install          binary, man pages and completions under PREFIX (default /usr/local)
#   make test             install missing test dependencies from apt, build, run every test
#   make bench            run the benchmarks (bench/run.sh)
#   make completions      write completions/ from the command registry
#   make docs             update the generated parts of docs/ and render build/man/*.1
#   make golden-update    record the expected output of Tests/golden/ (then fails on purpose)
#   make demo             the main job end to end on file:// storage (scripts/demo.sh)
#   make clean            remove build products

SHELL := /bin/bash
SWIFT ?= swift

PREFIX ?= /usr/local
DESTDIR ?=
BINDIR ?= $(PREFIX)/bin
MANDIR ?= $(PREFIX)/share/man/man1
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
ZSHCOMPDIR ?= $(PREFIX)/share/zsh/site-functions
FISHCOMPDIR ?= $(PREFIX)/share/fish/vendor_completions.d

RELEASE_BIN := .build/release/coven
DEBUG_BIN := .build/debug/coven

.PHONY: all build debug install uninstall man test bench completions docs golden-update demo clean

all: build

# The Swift runtime and Foundation linked statically: a larger binary (about 75 MB) that starts
# faster and maps about 6 MiB less memory in every process (see bench/).
RELEASE_FLAGS := -c release --static-swift-stdlib

build:
	$(SWIFT) build $(RELEASE_FLAGS)

debug:
	$(SWIFT) build

# Man pages for install, rendered from the committed docs/ by the binary being installed.
man: build
	rm -rf build/man
	$(RELEASE_BIN) __man docs build/man >/dev/null

install: build man
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR) $(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(ZSHCOMPDIR) $(DESTDIR)$(FISHCOMPDIR)
	install -m 0755 $(RELEASE_BIN) $(DESTDIR)$(BINDIR)/coven
	install -m 0644 build/man/*.1 $(DESTDIR)$(MANDIR)/
	install -m 0644 completions/coven.bash $(DESTDIR)$(BASHCOMPDIR)/coven
	install -m 0644 completions/_coven $(DESTDIR)$(ZSHCOMPDIR)/_coven
	install -m 0644 completions/coven.fish $(DESTDIR)$(FISHCOMPDIR)/coven.fish

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/coven $(DESTDIR)$(MANDIR)/coven.1 $(DESTDIR)$(MANDIR)/coven-*.1
	rm -f $(DESTDIR)$(BASHCOMPDIR)/coven $(DESTDIR)$(ZSHCOMPDIR)/_coven $(DESTDIR)$(FISHCOMPDIR)/coven.fish

test:
	scripts/setup-test-deps.sh
	$(SWIFT) build
	COVEN_REQUIRE_SHELLS=1 $(SWIFT) test

bench:
	bench/run.sh

completions: debug
	for shell in bash zsh fish; do \
	    case $$shell in bash) file=coven.bash ;; zsh) file=_coven ;; fish) file=coven.fish ;; esac; \
	    $(DEBUG_BIN) completions $$shell > completions/$$file.tmp && mv completions/$$file.tmp completions/$$file || exit 1; \
	done

docs: debug
	$(DEBUG_BIN) __docs docs
	rm -rf build/man
	$(DEBUG_BIN) __man docs build/man

golden-update: debug
	RECORD_GOLDEN=1 $(SWIFT) test --filter GoldenTests

demo:
	scripts/setup-test-deps.sh --build
	scripts/demo.sh

clean:
	rm -rf .build build
