#!/usr/bin/env bash
# The API reference: builds the `doc` target (Doxygen over the headers, cmake/ApsDocs.cmake) and
# checks that the pages a user starts from exist and carry the headers' comments.
#   api_docs_test.sh CMAKE BUILD_DIR
set -euo pipefail
cmake=$1 build=$2
fail() { echo "api_docs_test: $*" >&2; exit 1; }
rm -rf "$build/docs/api"
"$cmake" --build "$build" --target doc >"$build/docs-build.log" 2>&1 || { cat "$build/docs-build.log"; fail "the doc target failed"; }
html=$build/docs/api/html
[[ -f "$html/index.html" ]] || fail "no $html/index.html"
grep -q "Components, their headers and targets" "$html/index.html" || fail "index.html is not docs/API.md"
for class in aps::precision::Quantizer aps::precision::Codec aps::comm::AllReduceAlgorithm aps::comm::Transport \
             aps::Tensor aps::nn::Module aps::optim::Optimizer aps::data::Dataset aps::train::Trainer; do
  # Doxygen's page names: class or struct + the qualified name with '::' as '_1_1'.
  page=$(sed -e 's/::/_1_1/g' <<<"$class")
  [[ -f "$html/class$page.html" || -f "$html/struct$page.html" ]] || fail "no page for $class ($html/class$page.html)"
done
# The headers' plain // comments reach the class pages (cmake/doxygen-comments.sed), not only
# the source listings: FloatFormat's comment on its own page.
grep -qF "A binary floating-point format with one sign bit" "$html/structaps_1_1precision_1_1FloatFormat.html" ||
  fail "precision/FloatFormat.h's comment is not on FloatFormat's page"
echo "api_docs_test: ok ($(find "$html" -name '*.html' | wc -l) pages)"
