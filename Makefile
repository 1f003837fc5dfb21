# Nodewright. `make help` lists the targets.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

include hack/versions.env

ROOT        := $(abspath .)
K8S_BIN     := $(ROOT)/bin/k8s/$(KUBE_VERSION)
TOOLS       := $(ROOT)/bin/tools
CONTROLLER_GEN := $(TOOLS)/controller-gen-$(CONTROLLER_GEN_VERSION)
GOLANGCI_LINT  := $(TOOLS)/golangci-lint-$(GOLANGCI_LINT_VERSION)
COSIGN         := $(TOOLS)/cosign-$(COSIGN_VERSION)
HELM           := $(TOOLS)/helm-$(HELM_VERSION)
# Each package's tests get 30 minutes, not go test's 10: a busy CI machine can take several
# times an idle one's, and a stuck test still stops well within CI's limit.
GO_TEST_FLAGS ?= -count=1 -timeout=30m
export KUBEBUILDER_ASSETS := $(K8S_BIN)
# The cosign the EdgeProfile signature tests run against (internal/profile).
export NODEWRIGHT_COSIGN := $(COSIGN)
# The helm the chart's tests run (test/chart).
export NODEWRIGHT_HELM := $(HELM)
# The DRBD command tests (internal/drbd) fail without drbdadm instead of skipping.
export NODEWRIGHT_REQUIRE_DRBD_UTILS := 1
# The network tests (the agent's bond in network namespaces) fail without root or iproute2
# instead of skipping.
export NODEWRIGHT_REQUIRE_NETNS := 1

##@ Everyday

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z0-9_-]+:.*##/ {printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2} /^##@/ {printf "\n%s\n", substr($$0, 5)}' $(MAKEFILE_LIST)

.PHONY: demo
demo: build control-plane $(HELM) ## Start the local site: a simulated 3-node cluster with Nodewright running on it (as root, with its storage network).
	@if [ "$$(id -u)" = 0 ] && [ "$${NODEWRIGHT_DEMO_NETWORK:-}" != off ]; then hack/iproute2.sh >/dev/null && hack/drbd-utils.sh >/dev/null; fi
	@hack/grub-common.sh >/dev/null
	@hack/demo.sh up

.PHONY: demo-down
demo-down: ## Stop the local site and every process it started.
	@hack/demo.sh down

.PHONY: demo-fleet
demo-fleet: build control-plane $(HELM) ## Start a fleet hub and three member sites (docs/demo-fleet.md), as root with a flip running on site-b.
	@if [ "$$(id -u)" = 0 ] && [ "$${NODEWRIGHT_DEMO_NETWORK:-}" != off ]; then hack/iproute2.sh >/dev/null && hack/drbd-utils.sh >/dev/null; fi
	@hack/demo-fleet.sh up

.PHONY: demo-fleet-down
demo-fleet-down: ## Stop the fleet demo and every process it started.
	@hack/demo-fleet.sh down

.PHONY: test
test: control-plane $(COSIGN) $(HELM) chromium drbd-utils grub-common iproute2 ## Run the unit, integration (real API server), browser and end-to-end tests.
	go test $(GO_TEST_FLAGS) ./...
	NODEWRIGHT_FLEET_MEMBERS=simulator go test $(GO_TEST_FLAGS) ./internal/fleet

# PKGS narrows it, e.g. `make test-stress PKGS=./internal/ui/...`; see docs/development.md.
.PHONY: test-stress
test-stress: control-plane $(COSIGN) $(HELM) chromium drbd-utils grub-common iproute2 ## Run the tests while a CPU hog keeps every core busy, as on a shared CI machine.
	GO_TEST_FLAGS='$(GO_TEST_FLAGS)' hack/stress-test.sh $(PKGS)

.PHONY: bench
bench: ## Run the benchmarks (copy, bridge, audit, migration, agent, checkpoint, flip, deadpeer, upgrade, osupgrade, fleet, fleetpage, snapshot) and print each figure against its baseline or target.
	hack/bench.sh

##@ Development

# bin/agent-site is the agent of the local site (make demo), built with the site's played bond
# (test/site/netsite).
.PHONY: build
build: ## Build the binaries into bin/.
	CGO_ENABLED=0 go build -trimpath -o bin/ ./cmd/...
	CGO_ENABLED=0 go build -trimpath -tags nodewright_site -o bin/agent-site ./cmd/agent

# PLATFORMS (default linux/amd64,linux/arm64), VERSION, REVISION and SOURCE_DATE_EPOCH (defaults
# from git) may be set, e.g. `make images PLATFORMS=linux/arm64`; see docs/images.md.
.PHONY: images
images: ## Build the OCI image archives (operator, nodewright-copy, nodewright-linstor-gate, agent, nodewright-fleet) into bin/images/, reproducibly, without a container engine.
	go run ./hack/images -out bin/images$(if $(PLATFORMS), -platforms '$(PLATFORMS)')$(if $(VERSION), -version '$(VERSION)')$(if $(REVISION), -revision '$(REVISION)')

.PHONY: chart
chart: images $(HELM) ## Package the charts (nodewright, nodewright-fleet) into bin/charts/, referencing the images of bin/images by digest.
	go run ./hack/chartpackage -helm $(HELM) -digests bin/images/digests.yaml -out bin/charts
	go run ./hack/chartpackage -helm $(HELM) -chart charts/nodewright-fleet -digests bin/images/fleet-digests.yaml -out bin/charts

.PHONY: chromium
chromium: ## Install Debian's chromium (for the UI's browser tests) when it is missing.
	@hack/chromium.sh >/dev/null

.PHONY: drbd-utils
drbd-utils: ## Install Debian's drbd-utils (drbdadm, for the DRBD command tests) when it is missing.
	@hack/drbd-utils.sh >/dev/null

.PHONY: grub-common
grub-common: ## Install Debian's grub-common (grub-editenv, the played Kairos hosts' boot assessment) when it is missing.
	@hack/grub-common.sh >/dev/null

.PHONY: iproute2
iproute2: ## Install Debian's iproute2 (ip, bridge: the network namespaces of the agent's tests) when it is missing.
	@hack/iproute2.sh >/dev/null

.PHONY: control-plane
control-plane: ## Build (or reuse) kube-apiserver, etcd, kubectl, kwok... into bin/k8s/<version>/.
	@hack/control-plane.sh >/dev/null

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Regenerate deepcopy code, CRDs (ours and the third-party ones), RBAC, webhooks, the charts' generated parts and docs/capabilities.md.
	$(CONTROLLER_GEN) object paths={./api/...,./internal/workflow/example/api/...}
	# The example workflow's CRD is installed by its tests alone.
	$(CONTROLLER_GEN) crd paths=./internal/workflow/example/api/... output:crd:artifacts:config=internal/workflow/example/testdata/crd
	$(CONTROLLER_GEN) crd paths=./api/v1alpha1/... output:crd:artifacts:config=config/crd/bases
	{ echo "resources:"; for f in config/crd/bases/*.yaml; do echo "- bases/$${f##*/}"; done; } > config/crd/kustomization.yaml
	# The fleet hub's CRDs go on the hub only, never in the member chart (which ships config/crd/bases);
	# hack/chart copies them, with the ClusterProfile CRD, into the hub's chart (charts/nodewright-fleet/crds).
	$(CONTROLLER_GEN) crd paths=./api/fleet/... output:crd:artifacts:config=config/crd/fleet
	$(CONTROLLER_GEN) rbac:roleName=nodewright-operator paths=./internal/... output:rbac:artifacts:config=config/rbac
	$(CONTROLLER_GEN) webhook paths={./internal/webhook/...,./internal/workflows/...} output:webhook:artifacts:config=config/webhook
	sed -i -e 's/name: mutating-webhook-configuration/name: nodewright-mutating-webhook/' \
		-e 's/name: validating-webhook-configuration/name: nodewright-validating-webhook/' \
		-e 's/name: webhook-service/name: nodewright-webhook/' -e 's/namespace: system/namespace: nodewright-system/' \
		config/webhook/manifests.yaml
	go run ./hack/capabilities -o docs/capabilities.md
	go run ./hack/chart
	CONTROLLER_GEN=$(CONTROLLER_GEN) hack/thirdparty-crds.sh

.PHONY: verify
verify: generate ## Fail when generated files are stale or the code is not gofmt/vet clean.
	@if [ -n "$$(git status --porcelain -- api config charts docs/capabilities.md internal/workflow/example)" ]; then \
		echo "Generated files are out of date; run 'make generate' and commit:"; \
		git status --porcelain -- api config charts docs/capabilities.md internal/workflow/example; git --no-pager diff --stat -- api config charts docs/capabilities.md internal/workflow/example; exit 1; fi
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$unformatted" ]; then \
		echo "Not gofmt-clean:"; echo "$$unformatted"; exit 1; fi
	go vet ./...
	go vet -tags nodewright_site ./cmd/agent/...

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run golangci-lint (also on the agent built for the local site).
	$(GOLANGCI_LINT) run ./...
	$(GOLANGCI_LINT) run --build-tags nodewright_site ./cmd/agent/...

.PHONY: fuzz
fuzz: ## Run every fuzz target for a short while (FUZZTIME, default 30s each).
	hack/fuzz.sh $${FUZZTIME:-30s}

$(CONTROLLER_GEN):
	@mkdir -p $(TOOLS)
	GOBIN=$(TOOLS) go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)
	mv $(TOOLS)/controller-gen $@

$(GOLANGCI_LINT):
	@mkdir -p $(TOOLS)
	GOBIN=$(TOOLS) go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv $(TOOLS)/golangci-lint $@

# helm lints, renders and installs the chart in its tests; a tool, never a module dependency.
$(HELM):
	@hack/helm.sh >/dev/null

# cosign is a test tool (the signature compatibility tests), never a module dependency.
$(COSIGN):
	@hack/cosign.sh >/dev/null
