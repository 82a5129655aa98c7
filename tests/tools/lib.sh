# Shared by the shell tests of the command-line tools (sourced): the binaries from the
# environment, the Fashion-MNIST files (exit 77, ctest's skip, without them), a scratch
# directory removed on exit, and fail() that counts instead of stopping; finish() ends
# with the count.
set -uo pipefail

: "${ACTORTRAIN:?set ACTORTRAIN to the actortrain binary}"
: "${EXAMPLE:?set EXAMPLE to the example binary the test runs}"
data_dir=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
if [[ ! -e $data_dir/train-images-idx3-ubyte.gz ]]; then
  echo "SKIP: no Fashion-MNIST in $data_dir"
  exit 77
fi

# Under a sanitizer (tools/test --sanitize) `timeout N` gives N x ACTORTRAIN_TIME_SCALE
# seconds (tools/sanitizers/bin/timeout).
[ "${ACTORTRAIN_TIME_SCALE:-1}" = 1 ] ||
  PATH="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../tools/sanitizers/bin" && pwd):$PATH"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

finish() {
  if ((failures > 0)); then
    echo "$failures failure(s)"
    exit 1
  fi
  echo "PASS"
  exit 0
}
