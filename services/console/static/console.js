// relay console: live page parts over server-sent events, and one
// submission per form. Everything works without this file.
(function () {
  "use strict";
  var live = document.getElementById("live");
  var state = document.getElementById("livestate");
  function editing() {
    var a = document.activeElement;
    if (a && live.contains(a) && (a.tagName === "TEXTAREA" || a.tagName === "INPUT")) return true;
    return live.querySelector("details[open]") !== null;
  }
  function onceForms(root) {
    root.querySelectorAll("form[data-once]").forEach(function (f) {
      f.addEventListener("submit", function (ev) {
        var msg = f.getAttribute("data-confirm");
        if (msg && !window.confirm(msg)) { ev.preventDefault(); return; }
        if (f.dataset.sent) { ev.preventDefault(); return; }
        f.dataset.sent = "1";
        f.querySelectorAll("button").forEach(function (b) { b.setAttribute("aria-disabled", "true"); b.classList.add("busy"); });
      });
    });
  }
  onceForms(document);
  if (!live || !window.EventSource) return;
  var pending = null;
  var es = new EventSource(live.getAttribute("data-live"));
  es.addEventListener("open", function () { state.textContent = "live"; });
  es.addEventListener("error", function () { state.textContent = "reconnecting…"; });
  es.addEventListener("fragment", function (ev) {
    pending = ev.data;
    if (editing()) { state.textContent = "live (paused while you edit)"; return; }
    live.innerHTML = pending;
    pending = null;
    onceForms(live);
    state.textContent = "live";
    live.dispatchEvent(new CustomEvent("relay:updated"));
  });
  document.addEventListener("focusout", function () {
    setTimeout(function () {
      if (pending !== null && !editing()) { live.innerHTML = pending; pending = null; onceForms(live); }
    }, 0);
  });
})();
