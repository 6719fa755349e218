#!/usr/bin/env bash
# Stowage on kind in one command: build the image, create (or reuse) a kind cluster, load the image into it,
# install kube-prometheus-stack (Prometheus, the Prometheus Operator, Grafana) and the chart, and wait until
# every part runs. Follow-up: docs/quickstart.md.
#
# Usage: bash scripts/kind-up.sh [extra `helm` arguments for the Stowage chart, e.g. --set operator.dryRun=true]
#
# Environment (defaults in brackets):
#   CLUSTER [stowage]                      kind cluster name; reused if it exists
#   KIND_NODE_IMAGE [kindest/node:v1.30.13] node image of a new cluster (created with InPlacePodVerticalScaling on)
#   ENGINE [docker, else podman]           container engine that builds the image
#   PROMETHEUS [1]                         0: no kube-prometheus-stack (nothing harvests: opportunistic pods wait)
# Needs Helm 3.10+ (--set-json) and, with Docker, BuildKit (the default since Docker 23).
#   NAMESPACE [stowage-system]             the chart's namespace
#   MONITORING_NAMESPACE [monitoring]      kube-prometheus-stack's namespace (its Grafana finds the dashboard there)
#   CAPACITY [cpu=2,memory=4Gi]            nodeMonitor.capacity: kind nodes report the host's size (docs/install.md)
set -euo pipefail
cd "$(dirname "$0")/.."

CLUSTER=${CLUSTER:-stowage}
KIND_NODE_IMAGE=${KIND_NODE_IMAGE:-kindest/node:v1.30.13}
PROMETHEUS=${PROMETHEUS:-1}
NAMESPACE=${NAMESPACE:-stowage-system}
MONITORING_NAMESPACE=${MONITORING_NAMESPACE:-monitoring}
CAPACITY=${CAPACITY:-cpu=2,memory=4Gi}

die() {
  echo "kind-up: $*" >&2
  exit 1
}
need() {
  command -v "$1" >/dev/null 2>&1 || die "$1 not found on PATH: $2"
}

ENGINE=${ENGINE:-}
if [ -z "$ENGINE" ]; then
  if command -v docker >/dev/null 2>&1; then
    ENGINE=docker
  elif command -v podman >/dev/null 2>&1; then
    ENGINE=podman
  else
    die "no container engine: install Docker or Podman (or set ENGINE)"
  fi
fi
need "$ENGINE" "the container engine that builds the image"
need kind "https://kind.sigs.k8s.io/docs/user/quick-start/#installation"
need helm "Helm 3.10+ or 4: https://helm.sh/docs/intro/install/"
need kubectl "https://kubernetes.io/docs/tasks/tools/"

# --set-json (the capacity below) came with Helm 3.10: an older Helm would stop half-way, after the cluster.
helm_version=$(helm version --template '{{.Version}}' 2>/dev/null || true)
case "$helm_version" in
  v3.[0-9].* | v2.*) die "Helm $helm_version is too old: 3.10+ (or 4) is needed for --set-json" ;;
esac

version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' charts/stowage/Chart.yaml)
[ -n "$version" ] || die "no appVersion in charts/stowage/Chart.yaml"
image="stowage:$version"
context="kind-$CLUSTER"

echo "==> building $image with $ENGINE"
# The Dockerfile mounts the build stage's wheels (RUN --mount): Docker's BuildKit builder, the default since
# Docker 23; DOCKER_BUILDKIT=1 asks an older Docker for it. Podman (buildah) supports --mount itself.
if [ "$ENGINE" = docker ]; then
  DOCKER_BUILDKIT=1 "$ENGINE" build -t "$image" .
else
  "$ENGINE" build -t "$image" .
fi

if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  echo "==> using the existing kind cluster $CLUSTER (promotion needs InPlacePodVerticalScaling on it: docs/install.md)"
else
  echo "==> creating the kind cluster $CLUSTER ($KIND_NODE_IMAGE, InPlacePodVerticalScaling on)"
  # Promotion resizes a running opportunistic pod in place: an alpha gate before Kubernetes 1.33 (docs/install.md).
  config=$(mktemp)
  printf '%s\n' "kind: Cluster" "apiVersion: kind.x-k8s.io/v1alpha4" "featureGates:" \
    "  InPlacePodVerticalScaling: true" >"$config"
  kind create cluster --name "$CLUSTER" --image "$KIND_NODE_IMAGE" --config "$config" --wait 120s
  rm -f "$config"
fi
# kind switches kubectl to a cluster it creates, not to one it reuses: the commands the script prints (and
# yours) must reach this cluster, not whichever context was current.
kind export kubeconfig --name "$CLUSTER"

echo "==> loading $image into $CLUSTER"
if [ "$ENGINE" = docker ]; then
  kind load docker-image "$image" --name "$CLUSTER"
else
  # kind loads only from Docker's store; other engines go through an archive.
  archive=$(mktemp -t stowage-image.XXXXXX)
  trap 'rm -f "$archive"' EXIT
  "$ENGINE" save "$image" -o "$archive"
  kind load image-archive "$archive" --name "$CLUSTER"
fi

chart_args=()
if [ "$PROMETHEUS" = 1 ]; then
  echo "==> installing kube-prometheus-stack in $MONITORING_NAMESPACE"
  helm repo add prometheus-community https://prometheus-community.github.io/helm-charts --force-update >/dev/null
  # Select every ServiceMonitor and PodMonitor, not only the ones labelled with this release: Stowage's too.
  # The sidecar files a dashboard under the folder its ConfigMap's grafana_folder annotation names (Stowage's:
  # "Stowage"); without these two values every dashboard lands in General.
  helm upgrade --install kps prometheus-community/kube-prometheus-stack --kube-context "$context" \
    -n "$MONITORING_NAMESPACE" --create-namespace --wait --timeout 10m \
    --set prometheus.prometheusSpec.serviceMonitorSelectorNilUsesHelmValues=false \
    --set prometheus.prometheusSpec.podMonitorSelectorNilUsesHelmValues=false \
    --set grafana.sidecar.dashboards.folderAnnotation=grafana_folder \
    --set grafana.sidecar.dashboards.provider.foldersFromFilesStructure=true
  chart_args+=(--set "prometheus.url=http://prometheus-operated.$MONITORING_NAMESPACE.svc:9090"
               --set "dashboard.namespace=$MONITORING_NAMESPACE")
fi

echo "==> installing Stowage in $NAMESPACE"
# --set-json: the capacity's comma would split a --set (docs/install.md). ${a[@]+…}: bash before 4.4 (macOS's
# 3.2) calls an empty array unbound under `set -u` (PROMETHEUS=0 leaves chart_args empty).
helm upgrade --install stowage charts/stowage --kube-context "$context" -n "$NAMESPACE" --create-namespace \
  --wait --timeout 5m --set-json "nodeMonitor.capacity=\"$CAPACITY\"" ${chart_args[@]+"${chart_args[@]}"} "$@"
kubectl --context "$context" -n "$NAMESPACE" get deploy,ds,pods

echo
echo "Stowage runs on kind cluster $CLUSTER. Next (docs/quickstart.md):"
echo "  kubectl --context $context apply -f manifests/examples/one-label.yaml   # pods labelled stowage.io/queue: default"
echo "  kubectl --context $context get sq,pods -o wide"
if [ "$PROMETHEUS" = 1 ]; then
  echo "  kubectl --context $context -n $MONITORING_NAMESPACE port-forward svc/kps-grafana 3000:80   # dashboard \"Stowage\""
fi
