// Live refresh without a framework: poll the page's JSON endpoint (data-live on <main>) and swap in
// the sections the server rendered again; also asks before a control marked data-confirm is sent.
(function () {
  "use strict";
  var status = document.getElementById("live-status");
  function say(text) {
    if (status) { status.textContent = text; }
  }
  document.addEventListener("submit", function (event) {
    var question = event.target.getAttribute("data-confirm");
    if (question && !window.confirm(question)) { event.preventDefault(); }
  });
  var main = document.querySelector("main[data-live]");
  if (!main) { return; }
  var url = main.getAttribute("data-live");
  var every = parseInt(main.getAttribute("data-every"), 10) || 2000;
  var shown = {};  // the HTML last put in each section: an unchanged section is left alone
  function apply(data) {
    var sections = data.sections || {};
    Object.keys(sections).forEach(function (id) {
      var element = document.getElementById(id);
      if (element && shown[id] !== sections[id]) {
        element.innerHTML = sections[id];
        shown[id] = sections[id];
      }
    });
    var state = data.crawl && data.crawl.state;
    if (state === "finished" || state === "cancelled") { every = Math.max(every, 10000); }
  }
  function tick() {
    fetch(url, {credentials: "same-origin", cache: "no-store", headers: {"Accept": "application/json"}})
      .then(function (resp) {
        if (!resp.ok) { throw new Error("HTTP " + resp.status); }
        return resp.json();
      })
      .then(function (data) { apply(data); say("live · " + new Date().toLocaleTimeString()); })
      .catch(function (err) { say("not updating: " + err.message); })
      .then(function () { setTimeout(tick, every); });
  }
  setTimeout(tick, every);
}());
