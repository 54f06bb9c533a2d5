# hostcap: `make run` serves the --dev daemon, `make test` runs the tests.
# Both set themselves up (virtualenv, packages, the C extension) on a fresh machine.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEB_PACKAGES := libcap-dev bubblewrap gcc python3-dev e2fsprogs util-linux curl apparmor git
SOURCES := pyproject.toml setup.py $(wildcard daemon/hostcapd/childsetup_c/*.[ch])

.PHONY: venv frontend-user run test test-systemd systemd-root lint proto bench bench-quick soak dist clean

venv: $(STAMP)

$(STAMP): $(SOURCES)
	@missing=""; for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	$(PY) -m pip install -q -e '.[dev]'
	$(PY) setup.py -q build_ext --inplace
	touch $(STAMP)

run: venv
	$(VENV)/bin/hostcapd serve --dev

# The tests run the tenant front-ends as their dedicated user (a tenant's
# children run as nobody there): created from systemd/sysusers.d when root.
frontend-user:
	@if [ "$$(id -u)" = 0 ] && ! getent passwd hostcap-frontend >/dev/null; then \
	  systemd-sysusers --inline "$$(grep '^u hostcap-frontend ' systemd/sysusers.d/hostcap.conf)"; \
	fi

test: venv frontend-user
	$(PY) -m pytest -q

# The unit under Debian 12's systemd as pid 1 in systemd-nspawn, hostcapd
# installed there by docs/install.md's steps (tests/systemd/). The container's
# root is made once with debootstrap and kept in SYSTEMD_STATE (the packages
# of install.md's step 1 included, so a run does not fetch them); a run boots
# a throwaway overlay of it. Needs root.
SYSTEMD_STATE ?= .hostcap/systemd-test
SYSTEMD_DEB_PACKAGES := debootstrap systemd-container
# The Debian archive this machine's apt already uses (its sources), unless given.
DEBIAN_MIRROR ?= $(shell { sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/*.sources; \
  sed -n 's/^deb  *\(\[[^]]*\]  *\)\{0,1\}\([^ ]*\) bookworm .*/\2/p' /etc/apt/sources.list; } 2>/dev/null \
  | grep -v security | grep '/debian/*$$' | head -n 1)
SYSTEMD_ROOT_PACKAGES := systemd,systemd-sysv,dbus,procps,iproute2,ca-certificates,python3,python3-venv,python3-dev,gcc,libcap-dev

systemd-root: $(SYSTEMD_STATE)/debian12.stamp

$(SYSTEMD_STATE)/debian12.stamp:
	@missing=""; for p in $(SYSTEMD_DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi
	rm -rf $(SYSTEMD_STATE)/debian12 $(SYSTEMD_STATE)/debian12.new
	mkdir -p $(SYSTEMD_STATE)
	debootstrap --variant=minbase --include=$(SYSTEMD_ROOT_PACKAGES) bookworm $(SYSTEMD_STATE)/debian12.new $(DEBIAN_MIRROR)
	mv $(SYSTEMD_STATE)/debian12.new $(SYSTEMD_STATE)/debian12
	touch $@

test-systemd: venv systemd-root
	HOSTCAP_SYSTEMD_STATE=$(abspath $(SYSTEMD_STATE)) $(PY) -m pytest -q -m systemd -s tests/systemd

lint: venv
	$(VENV)/bin/ruff check proto/generate.py proto/hostcap_proto/*.py proto/hostcap_proto/audit daemon client tests bench
	$(VENV)/bin/ruff format --check daemon client tests bench
	$(VENV)/bin/mypy daemon/hostcapd client/hostcap proto/hostcap_proto

proto: venv
	$(PY) proto/generate.py

bench: venv
	$(PY) -m bench

bench-quick: venv
	$(PY) -m bench --quick

soak: venv
	$(PY) -m pytest -q -m soak tests/reliability

# The wheels, in dist/: hostcap (the daemon, hostcapctl and the client, with
# the C extension: for the host), hostcap_proto and hostcap_client (the
# engine side alone). docs/install.md says which goes where.
DIST ?= dist
dist: venv
	rm -rf $(DIST)
	$(PY) -m pip wheel --no-deps --no-build-isolation -q -w $(DIST) . ./proto ./client
	@# setuptools leaves its metadata in the tree, where it would shadow the installed one.
	rm -rf *.egg-info proto/*.egg-info client/*.egg-info
	@ls -1 $(DIST)

clean:
	rm -rf $(VENV) build dist *.egg-info daemon/hostcapd/*.so
