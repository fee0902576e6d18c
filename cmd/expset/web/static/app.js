// expset web: live refresh of the parts marked data-live, and "select the
// page" for dead letters. The page reads the same without it.
(function () {
  "use strict";
  var all = document.getElementById("all");
  if (all) {
    all.hidden = false;
    all.addEventListener("change", function () {
      document.querySelectorAll('input[name="ref"]').forEach(function (c) { c.checked = all.checked; });
    });
  }
  if (!document.body.hasAttribute("data-live")) { return; }
  var status = document.getElementById("live-status");
  var toggle = document.getElementById("live-toggle");
  var paused = false;
  function say(text) { if (status) { status.textContent = text; } }
  if (toggle) {
    toggle.hidden = false;
    toggle.addEventListener("click", function () {
      paused = !paused;
      toggle.textContent = paused ? "resume" : "pause";
      say(paused ? "paused" : "live");
    });
  }
  var busy = false;
  function tick() {
    if (paused || busy || document.hidden) { return; }
    busy = true;
    fetch(location.href, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { if (!r.ok) { throw new Error("HTTP " + r.status); } return r.text(); })
      .then(function (text) {
        var doc = new DOMParser().parseFromString(text, "text/html");
        document.querySelectorAll("[data-live]").forEach(function (el) {
          if (!el.id) { return; }
          var fresh = doc.getElementById(el.id);
          if (fresh) { el.replaceWith(document.importNode(fresh, true)); }
        });
        say("live · updated " + new Date().toLocaleTimeString());
      })
      .catch(function (e) { say("refresh failed (" + e.message + "), retrying"); })
      .then(function () { busy = false; });
  }
  say("live");
  setInterval(tick, 2000);
})();
