// The Logs page's live tail: follows new lines matching the page's filters over server-sent
// events, newest on top, with Pause/Resume. Log text is hostile: rows are built with textContent.
"use strict";

(function () {
  const section = document.getElementById("tail");
  if (!section || typeof EventSource === "undefined") return;
  const start = document.getElementById("tail-start");
  const pause = document.getElementById("tail-pause");
  const status = document.getElementById("tail-status");
  const table = document.getElementById("tail-table");
  const rows = document.getElementById("tail-rows");
  const lineBase = section.dataset.lineBase;
  const MAX_ROWS = 500; // a tail left open for hours keeps only the newest rows
  let source = null;
  let lastId = null; // the newest line shown: Resume continues after it
  let count = 0;

  function cell(text, className) {
    const td = document.createElement("td");
    if (className) td.className = className;
    td.textContent = text;
    return td;
  }

  // Log text in its own bidi isolate, as in the page's rows: a U+202E in a user name must not
  // reverse the "@" and the database after it.
  function isolated(text) {
    const bdi = document.createElement("bdi");
    bdi.textContent = text;
    return bdi;
  }

  function logCell(text, className) {
    const td = cell("", className);
    td.appendChild(isolated(text));
    return td;
  }

  function when(rfc3339) {
    return rfc3339 ? rfc3339.replace("T", " ").replace(/Z$/, "") + " UTC" : "never";
  }

  function row(line) {
    const tr = document.createElement("tr");
    tr.appendChild(cell(when(line.time), "time"));
    const kind = cell("", "");
    const badge = document.createElement("span");
    badge.className = "badge kind-" + String(line.kind).replace(/_/g, "-");
    badge.textContent = String(line.kind).replace(/_/g, " ");
    kind.appendChild(badge);
    tr.appendChild(kind);
    tr.appendChild(logCell(line.severity || "", ""));
    const who = cell("", "who");
    who.append(isolated(line.user || "-"), "@", isolated(line.database || "-"));
    tr.appendChild(who);
    tr.appendChild(logCell(line.message || "", "msg"));
    const link = document.createElement("td");
    if (/^[0-9]+$/.test(line.id)) {
      const a = document.createElement("a");
      a.href = lineBase + line.id;
      a.textContent = "Line " + line.id;
      link.appendChild(a);
    }
    tr.appendChild(link);
    return tr;
  }

  function url() {
    const u = new URL(section.dataset.tailUrl, window.location.href);
    if (lastId !== null) u.searchParams.set("after", lastId);
    return u.toString();
  }

  function say(text) {
    status.textContent = text;
  }

  function follow() {
    source = new EventSource(url());
    source.onopen = () => say("Following new lines (" + count + " so far).");
    source.onerror = () => say("Connection lost; trying again...");
    source.onmessage = (event) => {
      const line = JSON.parse(event.data);
      lastId = line.id;
      count += 1;
      rows.insertBefore(row(line), rows.firstChild);
      while (rows.children.length > MAX_ROWS) rows.removeChild(rows.lastChild);
      say("Following new lines (" + count + " so far).");
    };
  }

  function stop() {
    if (source) source.close();
    source = null;
  }

  start.hidden = false;
  say("Press Live tail to follow new lines as they are stored.");
  start.addEventListener("click", () => {
    start.hidden = true;
    pause.hidden = false;
    table.hidden = false;
    follow();
    pause.focus();
  });
  pause.addEventListener("click", () => {
    if (source) {
      stop();
      pause.textContent = "Resume";
      say("Paused (" + count + " lines so far).");
    } else {
      follow();
      pause.textContent = "Pause";
    }
  });
  window.addEventListener("pagehide", stop);
})();
