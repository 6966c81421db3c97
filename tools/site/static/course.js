// Typesets the page's math with KaTeX (served from assets/katex, nothing fetched from elsewhere),
// then marks the page: <html data-math="done"> (the browser test waits for it).
(function () {
  "use strict";
  var ENVIRONMENTS = ["equation", "equation*", "align", "align*", "alignat", "alignat*",
                      "gather", "gather*", "CD"];

  // KaTeX's default error colour is #cc0000; this one looks the same and marks only errors.
  var ERROR_COLOR = "#cc0001";
  var UNKNOWN_COMMAND = '.katex [style*="#cc0001"], .katex [style*="rgb(204, 0, 1)"]';

  function delimiters() {
    var list = [
      { left: "$$", right: "$$", display: true },
      { left: "\\[", right: "\\]", display: true }
    ];
    ENVIRONMENTS.forEach(function (env) {
      list.push({ left: "\\begin{" + env + "}", right: "\\end{" + env + "}", display: true });
    });
    list.push({ left: "\\(", right: "\\)", display: false });
    list.push({ left: "$", right: "$", display: false });
    return list;
  }

  function typeset() {
    var root = document.getElementById("content") || document.body;
    if (typeof window.renderMathInElement !== "function") {
      console.error("KaTeX auto-render did not load: math is not typeset");
      return;
    }
    window.renderMathInElement(root, {
      delimiters: delimiters(),
      ignoredTags: ["script", "noscript", "style", "textarea", "pre", "code", "option"],
      ignoredClasses: ["tex-dollar", "no-math"],
      throwOnError: false,
      errorColor: ERROR_COLOR,   // an unknown command is drawn in this colour (no .katex-error)
      globalGroup: true,   // \newcommand in one cell holds for the cells after it, as in Jupyter
      macros: {},
      errorCallback: function (msg, err) { console.error(msg, err); }
    });
    var bad = root.querySelectorAll(".katex-error, " + UNKNOWN_COMMAND);
    for (var i = 0; i < bad.length; i++) {
      if (bad[i].parentElement && bad[i].parentElement.closest(UNKNOWN_COMMAND)) continue;  // reported once
      bad[i].classList.add("katex-error");
      console.error("KaTeX could not typeset: " + (bad[i].getAttribute("title") || bad[i].textContent));
    }
  }

  function run() {
    try { typeset(); } finally { document.documentElement.setAttribute("data-math", "done"); }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", run);
  } else {
    run();
  }
})();
