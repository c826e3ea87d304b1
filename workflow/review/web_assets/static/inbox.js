// Keeps the open page current without a reload: every few seconds (body's data-poll-seconds) it
// asks the server for this page's <main> again (same URL plus partial=1, same origin, the session
// cookie) and swaps it in when its data-version changed (so a confirming step stays until the task
// moves on). Reasons typed into a still-pending call's box are kept. Without JavaScript the page
// works the same, minus the refresh.
(function () {
  "use strict";
  var seconds = Number(document.body.dataset.pollSeconds) || 2;
  function refresh() {
    var url = new URL(window.location.href);
    // After a post (the confirming step, a refusal) the address is the task's /decide: ask for the task.
    url.pathname = url.pathname.replace(/\/decide$/, "");
    url.searchParams.set("partial", "1");
    url.searchParams.delete("decided");
    fetch(url, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        var current = document.querySelector("main[data-version]");
        if (html === null || !current) return;
        var fresh = new DOMParser().parseFromString(html, "text/html").querySelector("main[data-version]");
        if (!fresh || fresh.dataset.version === current.dataset.version) return;
        var typed = {};
        current.querySelectorAll("textarea[data-call]").forEach(function (t) { typed[t.dataset.call] = t.value; });
        current.replaceWith(document.adoptNode(fresh));
        document.querySelectorAll("textarea[data-call]").forEach(function (t) {
          if (typed[t.dataset.call]) t.value = typed[t.dataset.call];
        });
      })
      .catch(function () {})
      .then(function () { window.setTimeout(refresh, seconds * 1000); });
  }
  window.setTimeout(refresh, seconds * 1000);
})();
