/* The web book's side of the concept checks (course_lib.quiz).
 *
 * Each quiz's HTML calls courseQuiz.show(containerId, questions). This file and
 * jupyterquiz's own JavaScript (_static/vendor/jupyterquiz/jupyterquiz.js, which
 * defines show_questions) are loaded only on pages with a quiz
 * (book/_ext/page_assets.py). The quiz is drawn once the page and MathJax are
 * ready: jupyterquiz typesets its text with MathJax when MathJax is there, and
 * would try to fetch MathJax from a CDN if it found a MathJax that has not
 * started yet.
 */
var courseQuiz = (function () {
  "use strict";
  function mathjaxReady() {
    var mj = window.MathJax;
    if (mj && mj.startup && mj.startup.promise) { return mj.startup.promise; }
    return Promise.resolve();
  }
  function draw(id, questions) {
    var el = document.getElementById(id);
    if (!el || el.dataset.courseQuizDrawn) { return; }
    if (typeof show_questions !== "function") {
      console.error("course quiz: jupyterquiz's script is not loaded");
      return;
    }
    el.dataset.courseQuizDrawn = "1";
    el.querySelectorAll(".course-quiz-fallback").forEach(function (e) { e.remove(); });
    show_questions(questions, el);
    localize(el);
  }
  // jupyterquiz's own words, on the pages of the Chinese edition (<html lang="zh-CN">)
  var ZH = {"Type numeric answer here:": "在此输入数值答案：", "Type your answer here:": "在此输入答案：",
            "Correct!": "正确！", "Incorrect -- try again.": "不对，再试一次。", "Incorrect. Try again.": "不对，再试一次。"};
  function localize(el) {
    if (!/^zh/.test(document.documentElement.lang || "")) { return; }
    el.querySelectorAll("label, span, div, p").forEach(function (e) {
      if (e.children.length === 0 && ZH.hasOwnProperty(e.textContent.trim())) { e.textContent = ZH[e.textContent.trim()]; }
    });
  }
  function show(id, questions) {
    var start = function () {
      mathjaxReady().then(function () { draw(id, questions); },
                          function () { draw(id, questions); });
    };
    if (document.readyState === "complete") { start(); }
    else { window.addEventListener("load", start); }
  }
  return { show: show };
})();
