// Loaded between require.js and embed-amd.js (see nb_ipywidgets_js in _config.yml).
// The widget manager loads its icon fonts from the folder of its AMD module; by
// default RequireJS places that module next to the page, so the fonts are not
// found. Point the module at the folder it is really served from.
(function () {
  var script = document.currentScript;
  if (!script || typeof require === "undefined" || !require.config) return;
  var vendor = script.src.replace(/[^\/]*$/, "").replace(/requirejs\/$/, "");
  require.config({
    paths: { "@jupyter-widgets/html-manager/dist": vendor + "html-manager" }
  });
})();
