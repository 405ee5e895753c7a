// Live updates: the server's event stream (/live) refreshes what the page shows.
// The overview re-reads its queue table (debounced) and lists the latest events; a job's
// page reloads when an event names its job, or a job of its workflow.
(function () {
  "use strict";
  var status = document.getElementById("live-status");
  var table = document.getElementById("queues");
  var feed = document.getElementById("feed");
  var heading = document.querySelector("[data-jid]");
  var jid = heading ? heading.getAttribute("data-jid") : null;
  var workflow = heading ? heading.getAttribute("data-workflow") : null;
  var reload = null;
  if (!table && !jid) { status.hidden = true; return; }  // this page is not kept live
  var pending = null;

  function refreshQueues() {
    pending = null;
    fetch(table.getAttribute("data-fragment"), { credentials: "same-origin" })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) { if (html !== null) { table.innerHTML = html; } });
  }

  function show(event) {
    if (!feed) { return; }
    var empty = feed.querySelector(".empty");
    if (empty) { empty.remove(); }
    var item = document.createElement("li");
    var parts = [new Date().toLocaleTimeString(), event.kind];
    ["queue", "jid", "worker", "group", "to"].forEach(function (key) {
      if (event[key]) { parts.push(key + "=" + event[key]); }
    });
    item.textContent = parts.join(" ");
    feed.insertBefore(item, feed.firstChild);
    while (feed.children.length > 50) { feed.removeChild(feed.lastChild); }
  }

  var source = new EventSource("/live");
  // A form sent (an action) navigates away: a reload now would race it and could win.
  document.addEventListener("submit", function () { source.close(); });
  source.onopen = function () { status.className = "live on"; };
  source.onerror = function () { status.className = "live off"; };
  source.onmessage = function (message) {
    var event = JSON.parse(message.data);
    if (table) {
      show(event);
      if (pending === null) { pending = setTimeout(refreshQueues, 500); }
    } else if (event.jid === jid || event.kind === "gap" ||
               (workflow && event.jid && event.jid.indexOf(workflow + "-") === 0)) {
      // at most a reload a second: a workflow's jobs and a job's progress change often
      if (reload === null) {
        reload = setTimeout(function () { source.close(); window.location.reload(); }, 1000);
      }
    }
  };
})();
