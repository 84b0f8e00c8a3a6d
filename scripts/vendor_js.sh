#!/usr/bin/env bash
# Vendor the JavaScript the book needs for offline viewing (MathJax 3, RequireJS
# and the ipywidgets HTML manager) from the npm registry.
#
#   scripts/vendor_js.sh            install from book/_vendor/package-lock.json (npm ci)
#   scripts/vendor_js.sh --update   re-resolve book/_vendor/package.json, rewrite the lock
#   scripts/vendor_js.sh --force    redo everything even if already done
#
# npm installs into .cache/vendor_js/ (git-ignored); only the files the pages load
# are copied into book/_vendor/static/vendor/ (git-ignored), which _config.yml
# serves through html_static_path as _static/vendor/... . Idempotent: when the lock
# file and this script are unchanged and the files are present, it exits at once.
# Needs node >= 18 and npm. See book/_vendor/README.md.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SRC="$ROOT/book/_vendor"              # committed: package.json, package-lock.json, README.md
WORK="$ROOT/.cache/vendor_js"         # git-ignored npm install folder
OUT="$SRC/static/vendor"              # git-ignored, served as _static/vendor/
STAMP="$SRC/static/.vendor-stamp"

mode=install
case "${1:-}" in
  "") ;;
  --update) mode=update ;;
  --force) mode=force ;;
  -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
  *) echo "vendor_js.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
esac

checksum() { cat "$SRC/package.json" "$SRC/package-lock.json" "$SRC/requirejs-config.js" "$0" | sha256sum | cut -d' ' -f1; }

if [[ $mode == install && -f "$STAMP" && -f "$SRC/package-lock.json" \
      && "$(cat "$STAMP")" == "$(checksum)" ]]; then
  echo "vendor_js: up to date ($OUT)"
  exit 0
fi

command -v npm >/dev/null || { echo "vendor_js: npm not found; install Node.js (>= 18) and npm" >&2; exit 1; }

mkdir -p "$WORK"
cp "$SRC/package.json" "$WORK/package.json"
npm_flags=(--ignore-scripts --no-audit --no-fund --loglevel=error)
if [[ $mode == update || ! -f "$SRC/package-lock.json" ]]; then
  rm -f "$WORK/package-lock.json"
  (cd "$WORK" && npm install "${npm_flags[@]}")
  cp "$WORK/package-lock.json" "$SRC/package-lock.json"
  echo "vendor_js: wrote book/_vendor/package-lock.json (commit it)"
elif [[ $mode != force && -f "$WORK/node_modules/.package-lock.json" ]] \
     && cmp -s "$SRC/package-lock.json" "$WORK/package-lock.json"; then
  echo "vendor_js: packages already installed in .cache/vendor_js"
else
  cp "$SRC/package-lock.json" "$WORK/package-lock.json"
  (cd "$WORK" && npm ci "${npm_flags[@]}")
fi

NM="$WORK/node_modules"
rm -rf "$SRC/static"
mkdir -p "$OUT/requirejs" "$OUT/html-manager" "$OUT/mathjax"

# RequireJS (the widget manager is an AMD module).
cp "$NM/requirejs/require.js" "$OUT/requirejs/"
cp "$SRC/requirejs-config.js" "$OUT/requirejs/"   # committed; tells RequireJS where embed-amd.js lives

# @jupyter-widgets/html-manager: embed-amd.js bundles the core ipywidgets and
# loads its icon fonts from the folder it was loaded from.
HM="$NM/@jupyter-widgets/html-manager/dist"
cp "$HM/embed-amd.js" "$OUT/html-manager/"
cp "$HM"/*.woff2 "$HM"/*.woff "$HM"/*.ttf "$HM"/*.eot "$HM"/*.svg "$OUT/html-manager/"
[[ -f "$HM/embed.js.LICENSE.txt" ]] && cp "$HM/embed.js.LICENSE.txt" "$OUT/html-manager/THIRD-PARTY-LICENSES.txt"

# MathJax 3: the combined component Sphinx uses plus what it loads on demand
# (TeX extensions, CommonHTML fonts, menu, accessibility, speech rules).
MJ="$NM/mathjax/es5"
cp "$MJ/tex-mml-chtml.js" "$OUT/mathjax/"
cp -r "$MJ/input" "$MJ/ui" "$MJ/a11y" "$MJ/adaptors" "$MJ/sre" "$OUT/mathjax/"
mkdir -p "$OUT/mathjax/output"
cp -r "$MJ/output/chtml" "$MJ/output/chtml.js" "$OUT/mathjax/output/"
cp "$NM/mathjax/LICENSE" "$OUT/mathjax/LICENSE"

# Vega, Vega-Lite and vega-embed: the explorers' charts (course_book.explorers) draw
# and respond in the page itself, with no kernel. Loaded as plain scripts before
# any AMD loader, so each defines its global (vega, vegaLite, vegaEmbed).
mkdir -p "$OUT/vega"
cp "$NM/vega/build/vega.min.js" "$NM/vega-lite/build/vega-lite.min.js" "$NM/vega-embed/build/vega-embed.min.js" "$OUT/vega/"
for p in vega-lite vega-embed; do cp "$NM/$p/LICENSE" "$OUT/vega/LICENSE-$p.txt"; done
echo "vega $(node -p "require(\"$NM/vega/package.json\").version"): BSD-3-Clause (its package.json; its npm package ships no LICENSE file; text: https://github.com/vega/vega/blob/main/LICENSE)" > "$OUT/vega/LICENSE-vega.txt"

# Versions actually installed, for the record.
node -e '
  const dir = process.argv[1];
  for (const p of ["requirejs", "@jupyter-widgets/html-manager", "mathjax", "vega", "vega-lite", "vega-embed"])
    console.log(p + "@" + require(dir + "/" + p + "/package.json").version);
' "$NM" > "$OUT/VERSIONS.txt"

checksum > "$STAMP"
echo "vendor_js: done: $(tr '\n' ' ' < "$OUT/VERSIONS.txt")($(du -sh "$OUT" | cut -f1) in book/_vendor/static/vendor)"
