# agentplane: a Kubernetes control plane for AI-agent workloads.
# `make help` lists every target.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

ROOT  := $(CURDIR)
BIN   := $(ROOT)/bin
TOOLS := $(BIN)/tools
# Static binaries, and one build cache for the tools whatever the shell exports: tools built by
# hand with CGO_ENABLED=1 exported (as the race tests want) are other builds to Go's cache, so a
# fresh-clone CI that exports nothing compiled every tool again from source (2026-12-06). The race
# tests set CGO_ENABLED=1 themselves (test-unit, hack/test-integration.sh, hack/test-stress.sh);
# `make CGO_ENABLED=1 ...` still overrides.
export CGO_ENABLED := 0
# The Go toolchain every build, test and tool uses: go1.27.3, downloaded by the go command from the
# module proxy on first use (go.work names it too, for `go` run by hand where GOTOOLCHAIN is auto).
# This machine's own Go, go1.26.8, has standard-library vulnerabilities that govulncheck reports
# (`make vulncheck`, part of `make lint`); its go.env sets GOTOOLCHAIN=local, so it is exported here.
export GOTOOLCHAIN ?= go1.27.3

# Tool versions. Kubernetes and etcd are pinned in their tools modules' go.mod (the single source
# of truth); the rest here. Each binary lives under a folder named for its version, so a bump
# rebuilds it.
KUBE_VERSION               := $(shell awk '$$1=="k8s.io/kubernetes"{print $$2; exit}' hack/tools/kube/go.mod)
ETCD_VERSION               := $(shell awk '/^require go.etcd.io\/etcd\/server\/v3 /{print $$3}' hack/tools/etcd/go.mod)
# kwok is built in the Kubernetes tools module, on the same Kubernetes packages (one build for all).
KWOK_VERSION               := $(shell awk '$$1=="sigs.k8s.io/kwok"{print $$2; exit}' hack/tools/kube/go.mod)
CONTROLLER_GEN_VERSION     ?= v0.23.0
CODE_GENERATOR_VERSION     ?= v0.37.2
HELM_VERSION               ?= v3.22.0
BUF_VERSION                ?= v1.75.0
PROTOC_GEN_GO_VERSION      ?= v1.36.12
PROTOC_GEN_GO_GRPC_VERSION ?= v1.6.2
JAEGER_VERSION             ?= v1.76.0
CRICTL_VERSION             ?= v1.37.0
# NetworkPolicy on make cluster-up's node (its firewall only). v2.1.0 is the version the module
# proxy serves; security advisories are reported against it: it runs only on the local test node.
KUBE_ROUTER_VERSION        ?= v2.1.0
GOLANGCI_LINT_VERSION      ?= v2.15.0
# The charts' tests: promtool (rules unit tests) from the Prometheus module, without its service
# discovery plugins (remove_all_sd: rules need none); chart-testing's ct, pinned in its tools
# module (the module proxy serves its versions but no version list, which go install needs).
PROMETHEUS_VERSION         ?= v0.316.0
GOVULNCHECK_VERSION        ?= v1.9.0
# krew (the kubectl plugin manager) and its manifest validator, which the test of make dist's krew
# manifest runs. Built from krew's own module: as a dependency of the e2e module it would bring
# k8s.io/client-go v11.0.0+incompatible, which the go command picks over v0.37.2.
KREW_VERSION               ?= v0.4.3
# The Go vulnerability database as the golang.org/x/vulndb module holds it (its OSV reports), at a
# pinned commit: govulncheck reads it from a folder, as this machine cannot reach vuln.go.dev. Bump
# it to learn of newer vulnerabilities.
VULNDB_VERSION             ?= v0.0.0-20261105234957-e22db6528018

KUBE_DIR           := $(TOOLS)/kube/$(KUBE_VERSION)
KUBE_APISERVER     := $(KUBE_DIR)/kube-apiserver
KUBE_CM            := $(KUBE_DIR)/kube-controller-manager
KUBE_SCHEDULER     := $(KUBE_DIR)/kube-scheduler
KUBECTL            := $(KUBE_DIR)/kubectl
# The real node of `make cluster-up` (built from the same module, only for it).
KUBELET            := $(KUBE_DIR)/kubelet
KUBE_PROXY         := $(KUBE_DIR)/kube-proxy
ETCD               := $(TOOLS)/etcd/$(ETCD_VERSION)/etcd
KWOK_DIR           := $(TOOLS)/kwok/$(KWOK_VERSION)
KWOK               := $(KWOK_DIR)/kwok
KWOK_STAGES        := $(KWOK_DIR)/stages/.done
KWOK_POD_STAGES    := $(wildcard hack/local/kwok-stages/*.yaml)
CONTROLLER_GEN     := $(TOOLS)/controller-gen/$(CONTROLLER_GEN_VERSION)/controller-gen
CODEGEN_BIN        := $(TOOLS)/code-generator/$(CODE_GENERATOR_VERSION)
CODEGEN            := $(CODEGEN_BIN)/.done
HELM               := $(TOOLS)/helm/$(HELM_VERSION)-stamped/helm
PROMTOOL           := $(TOOLS)/promtool/$(PROMETHEUS_VERSION)/promtool
CT_VERSION         := $(shell awk '$$1=="github.com/helm/chart-testing/v3"{print $$2; exit}' hack/tools/ct/go.mod)
CT                 := $(TOOLS)/ct/$(CT_VERSION)/ct
BUF                := $(TOOLS)/buf/$(BUF_VERSION)/buf
PROTOC_GEN_GO      := $(TOOLS)/protoc-gen-go/$(PROTOC_GEN_GO_VERSION)/protoc-gen-go
PROTOC_GEN_GO_GRPC := $(TOOLS)/protoc-gen-go-grpc/$(PROTOC_GEN_GO_GRPC_VERSION)/protoc-gen-go-grpc
JAEGER             := $(TOOLS)/jaeger/$(JAEGER_VERSION)/jaeger
# make cluster-up's pieces: CoreDNS and the registry are pinned in their tools modules' go.mod.
COREDNS_VERSION    := $(shell awk '/^require github.com\/coredns\/coredns /{print $$3}' hack/tools/coredns/go.mod)
REGISTRY_VERSION   := $(shell awk '/^require github.com\/distribution\/distribution\/v3 /{print $$3}' hack/tools/registry/go.mod)
COREDNS            := $(TOOLS)/coredns/$(COREDNS_VERSION)/coredns
REGISTRY_BIN       := $(TOOLS)/registry/$(REGISTRY_VERSION)/registry
CRICTL             := $(TOOLS)/crictl/$(CRICTL_VERSION)/crictl
KUBE_ROUTER        := $(TOOLS)/kube-router/$(KUBE_ROUTER_VERSION)/kube-router
PAUSE              := $(BIN)/cluster/pause
# golangci-lint must be built by a Go at least as new as the one whose packages it loads.
GOLANGCI_LINT      := $(TOOLS)/golangci-lint/$(GOLANGCI_LINT_VERSION)-$(GOTOOLCHAIN)/golangci-lint
GOVULNCHECK        := $(TOOLS)/govulncheck/$(GOVULNCHECK_VERSION)/govulncheck
KREW               := $(TOOLS)/krew/$(KREW_VERSION)/kubectl-krew
KREW_VALIDATE      := $(TOOLS)/krew/$(KREW_VERSION)/validate-krew-manifest
VULNDB_DIR         := $(TOOLS)/vulndb/$(VULNDB_VERSION)
VULNDB             := $(VULNDB_DIR)/index/db.json
ENVTEST_BIN        := $(BIN)/envtest

# Stamp the Kubernetes binaries with their version, as the release build does, so that
# `kubectl version` and discovery report v1.37.2 rather than v0.0.0-master.
KUBE_MINOR := $(word 2,$(subst ., ,$(KUBE_VERSION)))
KUBE_VERSION_LDFLAGS := $(foreach p,k8s.io/component-base/version k8s.io/client-go/pkg/version,\
	-X $(p).gitVersion=$(KUBE_VERSION) -X $(p).gitMajor=1 -X $(p).gitMinor=$(KUBE_MINOR) -X $(p).gitTreeState=clean)

SERVICES := run-controller status-writer event-emitter job-gc cancel-propagator watch-gateway agentctl
# The service charts, in the order the agentplane chart installs them.
CHART_SERVICES := status-writer event-emitter job-gc cancel-propagator run-controller watch-gateway
MODULES  := libs libs/testenv proto e2e examples/agent $(addprefix services/,$(SERVICES))
# Every package of the workspace's modules (go.work), for the tools that take them in one run.
WORKSPACE_PKGS := $(addsuffix /...,$(addprefix ./,$(MODULES)))
# Modules of our own code outside the workspace (built with GOWORK=off, for make cluster-up).
TOOL_MODULES := hack/tools/registry hack/tools/coredns hack/cluster/pause
VERSION  ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X github.com/agentplane/agentplane/libs/app.Version=$(VERSION)
# make images / make push: images are tagged with the commit (IMAGE_TAG), and the charts packaged
# with it as their appVersion (what they deploy) and a chart version naming it (CHART_VERSION:
# the tree's version, a pre-release of it per commit). Set both for a release.
IMAGE_TAG      ?= $(VERSION)
IMAGE_REGISTRY ?=
CHART_VERSION  ?= $(shell awk '/^version:/{print $$2; exit}' charts/agentplane/Chart.yaml)-g$(IMAGE_TAG)
# make dist: agentctl's archives, checksums and krew manifest (hack/dist.sh), for these platforms,
# with the manifest's URIs under DIST_URL (replace it with where the archives will be served).
DIST_DIR       ?= $(ROOT)/dist
DIST_PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64
DIST_URL       ?= https://example.invalid/agentplane/releases/$(VERSION)

# Where the local control plane keeps its state (kubeconfig, logs, pids, etcd data).
LOCAL_DIR ?= $(ROOT)/.local

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make \033[36m<target>\033[0m\n"} /^[a-zA-Z0-9_.-]+:.*?##/ { printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Tools

.PHONY: deps
deps: ## Install the Debian packages the tests need (what make up and make cluster-up need, and gcc, jq, chromium for the console test; hack/deps.sh).
	@hack/deps.sh test

.PHONY: deps-up
deps-up: ## Install the Debian packages make up needs (redis-server, openssl, curl, ca-certificates).
	@hack/deps.sh up

.PHONY: deps-cluster
deps-cluster: ## Install the Debian packages make cluster-up needs (make up's, the CNI plugins, iptables, ipset, conntrack).
	@hack/deps.sh cluster

.PHONY: tools
tools: tools-up $(CONTROLLER_GEN) $(CODEGEN) $(HELM) $(PROMTOOL) $(CT) $(BUF) $(PROTOC_GEN_GO) $(PROTOC_GEN_GO_GRPC) $(GOLANGCI_LINT) $(KREW) envtest-bin ## Build every pinned tool the tests use from its Go module into bin/tools (cold: the longest step of a fresh CI run; warm: seconds).

.PHONY: tools-up
tools-up: $(KUBE_APISERVER) $(KUBE_CM) $(KUBE_SCHEDULER) $(KUBECTL) $(ETCD) $(KWOK) $(KWOK_STAGES) ## Build only the tools make up runs (etcd, the Kubernetes control plane, kubectl, kwok).

.PHONY: tools-cluster
tools-cluster: tools-up $(KUBELET) $(KUBE_PROXY) $(CRICTL) $(COREDNS) $(REGISTRY_BIN) $(PAUSE) $(KUBE_ROUTER) $(HELM) ## Build what make cluster-up adds: kubelet, kube-proxy, crictl, CoreDNS, the registry, the pause binary, kube-router (and helm, to install).

.PHONY: tools-jaeger
tools-jaeger: $(JAEGER) ## Build Jaeger (all-in-one, OTLP on 4317/4318, UI on 16686) for local tracing.

# One go build for the four Kubernetes commands and kwok: they share most packages.
$(KUBE_APISERVER) $(KUBE_CM) $(KUBE_SCHEDULER) $(KUBECTL) $(KWOK) &: hack/tools/kube/go.mod hack/tools/kube/go.sum
	@echo ">> building Kubernetes $(KUBE_VERSION) (kube-apiserver, kube-controller-manager, kube-scheduler, kubectl) and kwok $(KWOK_VERSION)"
	@mkdir -p $(KWOK_DIR)
	cd hack/tools/kube && GOWORK=off go build -trimpath -ldflags '-s -w $(KUBE_VERSION_LDFLAGS)' -o $(KUBE_DIR)/ \
		k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
		k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl sigs.k8s.io/kwok/cmd/kwok
	@mv $(KUBE_DIR)/kwok $(KWOK)
	@touch $(KUBE_APISERVER) $(KUBE_CM) $(KUBE_SCHEDULER) $(KUBECTL) $(KWOK)

# The node's two commands: built only for make cluster-up, on the same module (and build cache).
$(KUBELET) $(KUBE_PROXY) &: hack/tools/kube/go.mod hack/tools/kube/go.sum
	@echo ">> building Kubernetes $(KUBE_VERSION) (kubelet, kube-proxy)"
	cd hack/tools/kube && GOWORK=off go build -trimpath -ldflags '-s -w $(KUBE_VERSION_LDFLAGS)' -o $(KUBE_DIR)/ \
		k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy
	@touch $(KUBELET) $(KUBE_PROXY)

$(COREDNS): hack/tools/coredns/go.mod hack/tools/coredns/go.sum hack/tools/coredns/main.go
	@echo ">> building CoreDNS $(COREDNS_VERSION)"
	cd hack/tools/coredns && GOWORK=off go build -trimpath -ldflags '-s -w' -o $@ .

$(REGISTRY_BIN): hack/tools/registry/go.mod hack/tools/registry/go.sum hack/tools/registry/main.go
	@echo ">> building the registry (distribution $(REGISTRY_VERSION))"
	cd hack/tools/registry && GOWORK=off go build -trimpath -ldflags '-s -w' -o $@ .

$(CRICTL):
	GOWORK=off GOBIN=$(@D) go install -trimpath -ldflags '-s -w' sigs.k8s.io/cri-tools/cmd/crictl@$(CRICTL_VERSION)

$(KUBE_ROUTER):
	GOWORK=off GOBIN=$(@D) go install -trimpath -ldflags '-s -w' github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@$(KUBE_ROUTER_VERSION)

$(PAUSE): hack/cluster/pause/main.go hack/cluster/pause/go.mod
	cd hack/cluster/pause && GOWORK=off GOOS=linux go build -trimpath -ldflags '-s -w' -o $@ .

$(ETCD): hack/tools/etcd/go.mod hack/tools/etcd/go.sum
	@echo ">> building etcd $(ETCD_VERSION)"
	cd hack/tools/etcd && GOWORK=off go build -trimpath -ldflags '-s -w' -o $@ go.etcd.io/etcd/server/v3

# kwok refuses to start without Stage definitions. The node stages come from its module; the pod
# stages are ours (hack/local/kwok-stages: kwok's general ones plus the agentplane.dev/simulate-*
# annotations). The folder is emptied first so that no stale stage is loaded beside ours; the
# stage folder is a prerequisite too, so that a removed or renamed stage also re-copies.
$(KWOK_STAGES): $(KWOK_POD_STAGES) hack/local/kwok-stages
	@mkdir -p $(@D)
	@rm -f $(@D)/*.yaml
	@src=$$(GOWORK=off GOFLAGS=-mod=mod go mod download -json sigs.k8s.io/kwok@$(KWOK_VERSION) | awk -F'"' '/"Dir"/{print $$4}'); \
	 cp $$src/kustomize/stage/node/fast/node-initialize.yaml \
	    $$src/kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml $(@D)/; \
	 cp $(KWOK_POD_STAGES) $(@D)/; \
	 chmod u+w $(@D)/*.yaml; touch $@

$(CONTROLLER_GEN):
	GOWORK=off GOBIN=$(@D) go install -trimpath sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)

$(CODEGEN):
	GOWORK=off GOBIN=$(@D) go install -trimpath $(addprefix k8s.io/code-generator/cmd/,$(addsuffix @$(CODE_GENERATOR_VERSION),client-gen lister-gen informer-gen applyconfiguration-gen))
	@touch $@

# helm stamped as upstream's release builds are: its version and commit (the module proxy's record
# of the tag, when it names one: proxy.golang.org's records stopped carrying the commit on
# 2026-12-02, and then helm version says GitCommit:"") and the Kubernetes version of the client-go it is built with (helm template's and
# helm lint's default when no --kube-version is given; unstamped, it is v1.20, which the charts'
# kubeVersion refuses).
$(HELM):
	@info=$$(GOWORK=off go mod download -json helm.sh/helm/v3@$(HELM_VERSION)); \
	commit=$$(echo "$$info" | sed -n 's/.*"Hash": *"\([0-9a-f]*\)".*/\1/p' | head -1); \
	gomod=$$(echo "$$info" | sed -n 's/.*"GoMod": *"\([^"]*\)".*/\1/p' | head -1); \
	minor=$$(awk '$$1=="k8s.io/client-go" {split($$2, v, "."); print v[2]; exit}' "$$gomod"); \
	[ -n "$$minor" ] || { echo "helm $(HELM_VERSION): no client-go version in the module proxy's go.mod of it" >&2; exit 1; }; \
	x=helm.sh/helm/v3; stamp=; \
	if [ -n "$$commit" ]; then stamp="-X $$x/internal/version.gitCommit=$$commit -X $$x/internal/version.gitTreeState=clean"; \
	else commit="none: the module proxy's record of the tag names no commit today"; fi; \
	echo "GOWORK=off GOBIN=$(@D) go install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION) (commit $$commit, Kubernetes 1.$$minor)"; \
	GOWORK=off GOBIN=$(@D) go install -trimpath -ldflags "-s -w -X $$x/internal/version.version=$(HELM_VERSION) $$stamp \
	  -X $$x/pkg/chartutil.k8sVersionMajor=1 -X $$x/pkg/chartutil.k8sVersionMinor=$$minor \
	  -X $$x/pkg/lint/rules.k8sVersionMajor=1 -X $$x/pkg/lint/rules.k8sVersionMinor=$$minor" helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

$(PROMTOOL):
	GOWORK=off GOBIN=$(@D) go install -trimpath -tags remove_all_sd -ldflags '-s -w' github.com/prometheus/prometheus/cmd/promtool@$(PROMETHEUS_VERSION)

$(CT): hack/tools/ct/go.mod hack/tools/ct/go.sum
	cd hack/tools/ct && GOWORK=off go build -trimpath -ldflags '-s -w -X github.com/helm/chart-testing/v3/ct/cmd.Version=$(CT_VERSION)' -o $@ github.com/helm/chart-testing/v3/ct

# krew and validate-krew-manifest in one go install; krew as kubectl-krew, the name `kubectl krew` runs.
$(KREW) $(KREW_VALIDATE) &:
	GOWORK=off GOBIN=$(@D) go install -trimpath -ldflags '-s -w -X sigs.k8s.io/krew/internal/version.gitTag=$(KREW_VERSION)' \
		sigs.k8s.io/krew/cmd/krew@$(KREW_VERSION) sigs.k8s.io/krew/cmd/validate-krew-manifest@$(KREW_VERSION)
	@mv $(@D)/krew $(KREW)

$(BUF):
	GOWORK=off GOBIN=$(@D) go install -trimpath -ldflags '-s -w' github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)

$(PROTOC_GEN_GO):
	GOWORK=off GOBIN=$(@D) go install -trimpath google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)

$(PROTOC_GEN_GO_GRPC):
	GOWORK=off GOBIN=$(@D) go install -trimpath google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)

$(GOLANGCI_LINT):
	GOWORK=off GOBIN=$(@D) go install -trimpath -ldflags '-s -w' github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

$(GOVULNCHECK):
	GOWORK=off GOBIN=$(@D) go install -trimpath -ldflags '-s -w' golang.org/x/vuln/cmd/govulncheck@$(GOVULNCHECK_VERSION)

# The module's data/osv holds one OSV report per vulnerability; its own indexdb command writes the
# folder layout govulncheck reads (index/db.json, index/modules.json, ID/<id>.json).
$(VULNDB):
	@echo ">> indexing the Go vulnerability database $(VULNDB_VERSION)"
	@rm -rf $(VULNDB_DIR) && mkdir -p $(VULNDB_DIR)
	@src=$$(GOWORK=off GOFLAGS=-mod=mod go mod download -json golang.org/x/vulndb@$(VULNDB_VERSION) | awk -F'"' '/"Dir"/{print $$4}'); \
	 GOWORK=off GOBIN=$(VULNDB_DIR)/.bin go install -trimpath golang.org/x/vulndb/cmd/indexdb@$(VULNDB_VERSION) && \
	 $(VULNDB_DIR)/.bin/indexdb -vulns $$src/data/osv -out $(VULNDB_DIR) && rm -rf $(VULNDB_DIR)/.bin

$(JAEGER): hack/tools/jaeger/go.mod hack/tools/jaeger/go.sum
	cd hack/tools/jaeger && GOWORK=off go build -trimpath -ldflags '-s -w' -o $@ github.com/jaegertracing/jaeger/cmd/jaeger

# envtest looks for etcd, kube-apiserver and kubectl in one folder.
.PHONY: envtest-bin
envtest-bin: $(ETCD) $(KUBE_APISERVER) $(KUBECTL)
	@mkdir -p $(ENVTEST_BIN)
	@ln -sf $(ETCD) $(ENVTEST_BIN)/etcd
	@ln -sf $(KUBE_APISERVER) $(ENVTEST_BIN)/kube-apiserver
	@ln -sf $(KUBECTL) $(ENVTEST_BIN)/kubectl

##@ Development

.PHONY: generate
generate: $(CONTROLLER_GEN) $(CODEGEN) $(BUF) $(PROTOC_GEN_GO) $(PROTOC_GEN_GO_GRPC) $(HELM) ## Regenerate deepcopy, CRDs (into charts/agentplane-crds), the typed clients of the API groups (libs/api/client: clientset, listers, informers, apply configurations), protobuf code, the variables each service reads (charts/agentplane-lib/templates/_readers.tpl), the service charts' schemas (from charts/agentplane-lib/schema and each values.own.schema.json), their README values tables, the admission policies and the cancel and archive switches make up and the tests apply (hack/local/admission-policies.yaml, cancel-switch.yaml, archive-switch.yaml) and docs/overview.svg (Graphviz).
	cd libs && $(CONTROLLER_GEN) object paths=./api/...
	cd libs && $(CONTROLLER_GEN) crd paths=./api/... output:crd:artifacts:config=../charts/agentplane-crds/files/crds
	CODEGEN_BIN=$(CODEGEN_BIN) hack/gen-clients.sh
	cd proto && PATH=$(dir $(PROTOC_GEN_GO)):$(dir $(PROTOC_GEN_GO_GRPC)):$$PATH $(BUF) generate
	cd e2e && go run ./cmd/envreaders ..
	cd e2e && go run ./cmd/chartschema ../charts $(CHART_SERVICES)
	cd e2e && go run ./cmd/valuesdoc $(addprefix ../charts/,$(CHART_SERVICES) agentplane)
	@$(MAKE) -s charts-deps
	@{ echo "# Generated by make generate from charts/agentplane-crds/templates/admission.yaml with the chart's"; \
	   echo "# default values: the admission policies make up and the integration tests apply. Do not edit."; \
	   $(HELM) template agentplane-crds charts/agentplane-crds --kube-version $(KUBE_VERSION) --show-only templates/admission.yaml; \
	 } >hack/local/admission-policies.yaml
	@{ echo "# Generated by make generate from charts/cancel-propagator/templates/cancel-switch.yaml (cluster-wide):"; \
	   echo "# the cancel switch make up and the integration tests turn on. Do not edit."; \
	   $(HELM) template make-up charts/cancel-propagator --namespace local --kube-version $(KUBE_VERSION) \
	     --set rbac.clusterScoped=true --show-only templates/cancel-switch.yaml; \
	 } >hack/local/cancel-switch.yaml
	@{ echo "# Generated by make generate from charts/job-gc/templates/archive-switch.yaml (in the namespace"; \
	   echo "# agents, where make up's job-gc archives; up.sh moves it to AGENTPLANE_NAMESPACE): the archive"; \
	   echo "# switch make up turns on while job-gc archives. Do not edit."; \
	   $(HELM) template make-up charts/job-gc --namespace local --kube-version $(KUBE_VERSION) \
	     --set 'controller.namespaces={agents}' --set archive.enabled=true --set archive.url=postgres://agentplane@localhost/agentplane \
	     --show-only templates/archive-switch.yaml; \
	 } >hack/local/archive-switch.yaml
	@command -v dot >/dev/null || { echo "make generate renders docs/overview.dot with Graphviz: hack/deps.sh test installs it (Debian: apt-get install graphviz)" >&2; exit 1; }
	dot -Tsvg docs/overview.dot -o docs/overview.svg

.PHONY: verify-gen
verify-gen: generate ## Fail when `make generate` changes the tree (CI runs this).
	@if [ -n "$$(git status --porcelain -- libs proto charts hack/local docs/overview.svg)" ]; then \
		echo "generated files are out of date; run 'make generate' and commit:"; git status --porcelain -- libs proto charts hack/local docs/overview.svg; exit 1; fi

.PHONY: build
build: ## Build every service binary and agentctl into bin/ (one go build over the workspace).
	@mkdir -p $(BIN)
	@echo ">> $(SERVICES)"
	go build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/ $(foreach s,$(SERVICES),./services/$(s)/cmd/$(s))

.PHONY: images
images: ## Build every image for linux (IMAGE_ARCH, default this machine's): the services, agentctl and the example agent, agentplane/<name>:$(IMAGE_TAG) (the commit), under $(IMAGE_REGISTRY) when set.
	@BIN=$(BIN) SERVICES="$(SERVICES)" IMAGE_TAG=$(IMAGE_TAG) IMAGE_REGISTRY=$(IMAGE_REGISTRY) LDFLAGS='$(LDFLAGS)' hack/images.sh

.PHONY: charts-deps
charts-deps: $(HELM) ## Build the charts' dependencies (helm dependency build: the library chart into each service chart, every chart into charts/agentplane); skipped when nothing changed.
	@HELM=$(HELM) hack/charts-deps.sh

.PHONY: chart-lint
chart-lint: $(HELM) $(CT) charts-deps ## ct lint (chart-testing, .ct/ct.yaml) of the charts changed since the merge-base with origin/main: helm lint, yamllint, and a version bump for each changed chart.
	@PATH=$(dir $(HELM)):$$PATH $(CT) lint --config .ct/ct.yaml --lint-conf .ct/lintconf.yaml

.PHONY: charts-package
charts-package: $(HELM) ## Package every chart into bin/charts/ as $(CHART_VERSION), appVersion $(IMAGE_TAG).
	@HELM=$(HELM) CHART_VERSION=$(CHART_VERSION) APP_VERSION=$(IMAGE_TAG) OUT=$(BIN)/charts hack/charts.sh

.PHONY: push
push: $(HELM) ## Build and push every image and chart to REGISTRY (host[:port][/path]): images as REGISTRY/agentplane/<name>:$(IMAGE_TAG), charts as oci://REGISTRY/charts/<chart>:$(CHART_VERSION).
	@[ -n "$(REGISTRY)" ] || { echo "usage: make push REGISTRY=host[:port][/path] (make cluster-up prints its registry)" >&2; exit 2; }
	@BIN=$(BIN) SERVICES="$(SERVICES)" IMAGE_TAG=$(IMAGE_TAG) IMAGE_REGISTRY=$(REGISTRY) LDFLAGS='$(LDFLAGS)' PUSH=1 hack/images.sh
	@HELM=$(HELM) CHART_VERSION=$(CHART_VERSION) APP_VERSION=$(IMAGE_TAG) OUT=$(BIN)/charts REGISTRY=$(REGISTRY) PUSH=1 hack/charts.sh

.PHONY: dist
dist: ## Cross-compile agentctl for DIST_PLATFORMS (default linux, darwin and windows on amd64 and arm64) into DIST_DIR (dist/): agentctl_<version>_<os>_<arch>.tar.gz each (the version make build stamps), checksums.txt, and krew/agentplane.yaml (a krew plugin manifest, uris under DIST_URL).
	@VERSION=$(VERSION) LDFLAGS='$(LDFLAGS)' CHART_VERSION=$(CHART_VERSION) DIST_DIR='$(DIST_DIR)' \
	  DIST_PLATFORMS='$(DIST_PLATFORMS)' DIST_URL='$(DIST_URL)' hack/dist.sh

.PHONY: chart-version
chart-version: ## Print the version make push gives the charts (for helm install --version).
	@echo $(CHART_VERSION)

.PHONY: build-alone
build-alone: ## Build each service with GOWORK=off, as its container image does.
	@for s in $(SERVICES); do \
		echo ">> $$s (GOWORK=off)"; (cd services/$$s && GOWORK=off go build -o /dev/null ./cmd/$$s); done

.PHONY: lint
lint: $(BUF) $(GOLANGCI_LINT) vulncheck ## gofmt, golangci-lint (.golangci.yml: go vet's analyzers and more) and govulncheck over the workspace's modules, go vet over the tool modules (hack/tools, hack/cluster), and buf lint over the .proto files.
	@out=$$("$$(go env GOROOT)/bin/gofmt" -l $(MODULES) hack); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	@cd proto && $(BUF) lint
	@# The workspace's modules in one golangci-lint run: one load of the dependencies they share
	@# (client-go above all) instead of one per module. Its govet runs every analyzer go vet runs
	@# (.golangci.yml), so there is no separate go vet.
	@$(GOLANGCI_LINT) run $(WORKSPACE_PKGS)
	@# The tool modules are a main each (154 lines in all) wiring upstream packages: go vet there.
	@# golangci-lint type-checks all of their dependencies from source (CoreDNS's every plugin):
	@# 3m24s of a cold lint for those lines, where go vet took 43 s (2026-12-05).
	@for m in $(TOOL_MODULES); do (cd $$m && GOWORK=off go vet ./...) || { echo "go vet: findings in $$m"; exit 1; }; done

# Part of lint. Against the pinned database, go1.26.8 (this machine's own Go) has standard-library
# vulnerabilities; GOTOOLCHAIN above picks a Go without them.
.PHONY: vulncheck
vulncheck: $(GOVULNCHECK) $(VULNDB) ## govulncheck over every module against the pinned Go vulnerability database (VULNDB_VERSION).
	@# One run over the workspace's modules (govulncheck wants a module folder to start from).
	@cd libs && $(GOVULNCHECK) -db file://$(VULNDB_DIR) -tags integration,e2e $(addprefix ../,$(WORKSPACE_PKGS))

.PHONY: tidy
tidy: ## go mod tidy in every module.
	@for m in $(MODULES); do (cd $$m && GOWORK=off go mod tidy); done

##@ Tests

.PHONY: test
test: deps tools test-unit test-integration test-e2e test-fuzz ## Run every test: unit, integration (real kube-apiserver + Redis) and e2e (local stack + containers).

.PHONY: test-unit
test-unit: ## Unit tests (no external parts), under the race detector.
	@echo ">> test-unit $$(date +%T)"
	CGO_ENABLED=1 go test -race -count=1 $(addsuffix /...,$(addprefix ./,$(filter-out e2e,$(MODULES))))

.PHONY: test-integration
test-integration: envtest-bin ## Integration tests against a real kube-apiserver + etcd and a real redis-server, under the race detector (the services they start too): each package with a test file tagged integration, one at a time (hack/test-integration.sh).
	@hack/test-integration.sh $(filter-out e2e,$(MODULES))

.PHONY: test-stress
test-stress: envtest-bin ## The integration tier ROUNDS times (default 5) in a row under -race with stress-ng loading every core (installs stress-ng); not part of `make test`.
	@PKGS="$(addsuffix /...,$(addprefix ./,$(filter-out e2e,$(MODULES))))" ROUNDS=$(or $(ROUNDS),5) hack/test-stress.sh

.PHONY: test-e2e
test-e2e: tools tools-jaeger tools-cluster build charts-deps ## End-to-end: the local control plane, service containers, the whole system in containers with Jaeger, and helm installs on a real node (make cluster-up; needs root), TestWholeSystem and the real-node tests beside the rest (testcontainers; AGENTPLANE_E2E_SKIP_DOCKER=1 skips the container suites, AGENTPLANE_E2E_SERIAL=1 runs one test at a time, E2E_RUN=regexp picks tests).
	@echo ">> test-e2e $$(date +%T)"
	cd e2e && go test -count=1 ./cmd/...
	hack/test-e2e.sh

.PHONY: test-fuzz
test-fuzz: ## A short fuzz run of the secret redactor (20s), part of `make test`.
	@echo ">> test-fuzz $$(date +%T)"
	@$(MAKE) -s fuzz FUZZTIME=20s

.PHONY: fuzz
fuzz: ## Fuzz the secret redactor for FUZZTIME (default 60s; a new input is minimized for at most 50 runs, so the time goes to fuzzing): a seeded corpus of secrets must never survive.
	cd libs && go test -run '^$$' -fuzz FuzzRedactNeverLeaksTheCorpus -fuzztime $(or $(FUZZTIME),60s) -fuzzminimizetime 50x ./redact/

.PHONY: bench
bench: tools build ## Benchmarks, one package at a time; each figure is printed as a ratio against a baseline measured in the same run (the last two run 1,000 AgentRuns, and a cancel of 100 running Jobs, each on its own local control plane). Results in .bench/<time>-<commit>/ (each benchmark 3 times, BENCH_COUNT=n for n; a tree with changes is refused; BENCH_PKGS=... BENCH_E2E=0 a part).
	@PKGS="$(or $(BENCH_PKGS),$(addsuffix /...,$(addprefix ./,$(filter-out e2e,$(MODULES)))))" BENCH_COUNT=$(or $(BENCH_COUNT),3) BENCH_E2E=$(or $(BENCH_E2E),1) hack/bench.sh

.PHONY: bench-scale
bench-scale: tools build ## 1,000 then 10,000 AgentRuns (and a tenth as many 5-step OrchestrationRuns) through the whole system on a local control plane: drain time, API requests, CPU and memory per run (25 to 45 minutes on this machine; not part of bench). Output in .bench/scale-<time>-<commit>.txt (AGENTPLANE_BENCH_SCALE_TIERS=1000,10000 sets the tiers).
	@mkdir -p .bench && out=.bench/scale-$$(date +%Y%m%dT%H%M%S)-$$(git rev-parse --short HEAD).txt && \
	  (cd e2e && go test -tags e2e -count=1 -run '^$$' -bench ScaleRuns -benchtime 1x -timeout 150m .) 2>&1 | tee "$$out"

.PHONY: bench-archive
bench-archive: tools build ## 10,000 AgentRuns through the whole system on a local control plane with job-gc's run archive off, then on (PostgreSQL): whole-life throughput on vs off and the archive's cost per run (API requests, CPU, write time, bytes; about 40 minutes; not part of bench). Output in .bench/archive-<time>-<commit>.txt (AGENTPLANE_BENCH_ARCHIVE_RUNS=n for another size).
	@mkdir -p .bench && out=.bench/archive-$$(date +%Y%m%dT%H%M%S)-$$(git rev-parse --short HEAD).txt && \
	  (cd e2e && go test -tags e2e -count=1 -run '^$$' -bench ArchiveTenThousandRuns -benchtime 1x -timeout 150m .) 2>&1 | tee "$$out"

.PHONY: bench-profile
bench-profile: tools build ## Profile, at HEAD, each benchmark that missed a goal or failed in the committed report's run (docs/bench-results/; BENCH_RUN=dir for another): CPU and allocation top frames as text in docs/measurements/profiles-<date>-<commit>/ (a tree with changes is refused).
	@hack/bench-profile.sh

.PHONY: bench-report
bench-report: ## Copy the newest make bench run in .bench/ (or BENCH_RUN=dir; its results, and its logs less their INFO lines) to docs/bench-results/ and generate docs/benchmarks.md's latest-run section from it.
	@run="$(or $(BENCH_RUN),$$(ls -d .bench/[0-9]*Z-*/ 2>/dev/null | sort | tail -1))"; \
	  [ -n "$$run" ] || { echo "no benchmark results in .bench/: run make bench first" >&2; exit 1; }; \
	  rm -rf docs/bench-results && mkdir -p docs/bench-results && cp "$${run%/}"/*.txt docs/bench-results/ && \
	  for log in "$${run%/}"/*.log; do grep -Ev '^[0-9/]{10} [0-9:]{8} INFO |^I[0-9]{4} ' "$$log" > docs/bench-results/$$(basename "$$log") || true; done && \
	  cd e2e && go run ./cmd/benchreport -run ../docs/bench-results -doc ../docs/benchmarks.md && \
	  echo ">> docs/benchmarks.md: generated from $$run (copied to docs/bench-results/)"

##@ Local control plane

# step TARGET: runs a make target and says how long it took (make up and cluster-up report each).
step = t=$$SECONDS; $(MAKE) --no-print-directory -s $(1); echo ">> $(1): $$((SECONDS - t)) s"

.PHONY: up
up: ## Start etcd, kube-apiserver, controller-manager, scheduler, kwok, Redis, every service (and Jaeger once `make tools-jaeger` built it) locally (no cluster, no Docker). Installs and builds only what that needs, and says how long each step took.
	@t0=$$SECONDS; $(call step,deps-up); $(call step,tools-up); $(call step,build); \
	  t=$$SECONDS; LOCAL_DIR=$(LOCAL_DIR) KUBE_DIR=$(KUBE_DIR) ETCD=$(ETCD) KWOK=$(KWOK) KWOK_STAGES=$(dir $(KWOK_STAGES)) SERVICES_BIN=$(BIN) JAEGER=$(JAEGER) AGENTPLANE_AGENT_IMAGE=agentplane/agent:$(IMAGE_TAG) hack/local/up.sh; \
	  echo ">> start: $$((SECONDS - t)) s; make up in all: $$((SECONDS - t0)) s"

.PHONY: down
down: ## Stop everything `make up` started (ONLY="name ..." stops only those components; `make up` starts them again).
	@LOCAL_DIR=$(LOCAL_DIR) hack/local/down.sh $(ONLY)

.PHONY: status
status: ## Show what `make up` is running.
	@LOCAL_DIR=$(LOCAL_DIR) hack/local/status.sh

##@ Local cluster with a real node

CLUSTER_DIR ?= $(ROOT)/.cluster

.PHONY: cluster-up
cluster-up: ## make up's control plane (no services), Redis, a registry and a real node (kubelet, containerd, kube-proxy, CoreDNS) beside kwok's; needs root and Docker. Then install the charts (README, "Install on a cluster").
	@t0=$$SECONDS; $(call step,deps-cluster); $(call step,tools-cluster); \
	  t=$$SECONDS; LOCAL_DIR=$(CLUSTER_DIR) KUBE_DIR=$(KUBE_DIR) ETCD=$(ETCD) KWOK=$(KWOK) KWOK_STAGES=$(dir $(KWOK_STAGES)) \
	  TOOLS=$(TOOLS) REGISTRY_BIN=$(REGISTRY_BIN) COREDNS_BIN=$(COREDNS) COREDNS_VERSION=$(COREDNS_VERSION) PAUSE_BIN=$(PAUSE) CRICTL=$(CRICTL) KUBE_ROUTER=$(KUBE_ROUTER) \
	  SERVICES_BIN=$(BIN) hack/cluster/up.sh; \
	  echo ">> start: $$((SECONDS - t)) s; make cluster-up in all: $$((SECONDS - t0)) s"

.PHONY: cluster-down
cluster-down: ## Stop everything make cluster-up started; leaves no pod, mount, interface, iptables rule or process behind (keeps .cluster/).
	@LOCAL_DIR=$(CLUSTER_DIR) CRICTL=$(CRICTL) hack/cluster/down.sh

.PHONY: cluster-env
cluster-env: ## Print the cluster's KUBECONFIG, PATH (kubectl, helm, agentctl), REGISTRY, REDIS_URL, ARCHIVE_URL and ARCHIVE_PASSWORD_FILE for a shell: eval "$$(make -s cluster-env)".
	@LOCAL_DIR=$(CLUSTER_DIR) KUBE_DIR=$(KUBE_DIR) HELM=$(HELM) hack/cluster/env.sh

.PHONY: cluster-status
cluster-status: ## Show what make cluster-up is running.
	@LOCAL_DIR=$(CLUSTER_DIR) hack/cluster/status.sh

.PHONY: clean
clean: ## Remove built service binaries (keeps tools) and local state (not a running cluster's: make cluster-down first).
	rm -rf $(addprefix $(BIN)/,$(SERVICES)) $(BIN)/linux_* $(BIN)/charts $(LOCAL_DIR)
