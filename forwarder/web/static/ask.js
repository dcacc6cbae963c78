// The Ask page: renders answers' Markdown safely, asks a question and shows its answer as it
// streams (tool steps, text, sources, actions), and sends feedback on answers.
//
// Answers are made from log text, which is hostile: markdown-it renders with raw HTML off, no
// images, and a link keeps its target only when it is a path of this site or an http(s) URL (any
// other link stays text). Everything else is inserted with textContent.
"use strict";

(function () {
  // --- Markdown ----------------------------------------------------------------------------------
  function safeHref(url) {
    const s = String(url).trim();
    if (/^\/(?![/\\])/.test(s)) return s; // this site's paths, not //host or /\host
    if (/^https?:\/\//i.test(s)) return s;
    return null;
  }
  function sitePath(url) {
    const s = safeHref(url);
    return s !== null && s.startsWith("/") ? s : null;
  }

  let md = null;
  if (typeof window.markdownit === "function") {
    md = window.markdownit({html: false, linkify: false, typographer: false});
    md.disable(["image"]); // ![x](y) stays text and a link: no request leaves for an image
    md.validateLink = (url) => safeHref(url) !== null; // a refused link is rendered as its text
    const linkOpen = md.renderer.rules.link_open ||
      ((tokens, idx, options, env, self) => self.renderToken(tokens, idx, options));
    md.renderer.rules.link_open = (tokens, idx, options, env, self) => {
      if (!String(tokens[idx].attrGet("href") || "").startsWith("/")) {
        tokens[idx].attrSet("rel", "noopener noreferrer nofollow");
      }
      return linkOpen(tokens, idx, options, env, self);
    };
  }

  // An answer's headings as levels under the answer's own heading (`top`: the level of its first
  // one), never skipping one (## then #### is h3 then h4): the page's outline stays whole whatever
  // levels the model wrote, as screen readers and axe-core's "heading-order" expect.
  function shiftHeadings(tokens, top) {
    const open = []; // the Markdown levels of the sections the current heading sits in
    tokens.forEach((t, i) => {
      if (t.type !== "heading_open") return;
      const level = Number(t.tag.slice(1));
      while (open.length && open[open.length - 1] >= level) open.pop();
      open.push(level);
      const tag = "h" + Math.min(6, top + open.length - 1);
      t.tag = tag;
      for (let j = i + 1; j < tokens.length; j++) {
        if (tokens[j].type === "heading_close") { tokens[j].tag = tag; break; }
      }
    });
  }

  // A table's header cell left empty (a column of links) is still named, for screen readers.
  function nameEmptyHeaders(root) {
    root.querySelectorAll("th").forEach((th) => {
      if (th.textContent.trim()) return;
      th.appendChild(el("span", "visually-hidden", "Column " + (th.cellIndex + 1)));
    });
  }

  // `text` (Markdown) as an element; without markdown-it, the text itself. `top`: the level its
  // headings start at (none: Markdown's own levels).
  function render(text, top) {
    const div = document.createElement("div");
    div.className = "md";
    if (md) {
      const env = {};
      const tokens = md.parse(String(text), env);
      if (top) shiftHeadings(tokens, top);
      div.innerHTML = md.renderer.render(tokens, md.options, env); // html: false escapes every tag in the text
      nameEmptyHeaders(div);
    } else {
      const p = document.createElement("p");
      p.className = "msg-text";
      p.textContent = String(text);
      div.appendChild(p);
    }
    return div;
  }
  window.askRender = (text) => render(text);

  // Each answer has a heading of this level (ask.html); its Markdown's headings go below it.
  const ANSWER_HEADINGS = 3;

  function el(tag, className, text) {
    const e = document.createElement(tag);
    if (className) e.className = className;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // Stored answers: their Markdown comes as JSON (no inline script runs under the CSP).
  const stored = document.getElementById("ask-markdown");
  const texts = stored ? JSON.parse(stored.textContent) : {};
  document.querySelectorAll("[data-markdown]").forEach((box) => {
    const text = texts[box.dataset.markdown];
    if (typeof text === "string") box.replaceChildren(render(text, ANSWER_HEADINGS));
  });

  // --- feedback ------------------------------------------------------------------------------------
  function wireFeedback(form) {
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const button = event.submitter;
      const data = new FormData(form);
      data.set("rating", button ? button.value : "");
      const resp = await fetch(form.action, {
        method: "POST", body: new URLSearchParams(data), headers: {"Accept": "application/json"},
        credentials: "same-origin",
      });
      if (!resp.ok) { status("Feedback not stored (" + resp.status + ")."); return; }
      const rating = (await resp.json()).rating;
      form.querySelectorAll("button[aria-pressed]").forEach((b) => {
        b.setAttribute("aria-pressed", b.value === rating ? "true" : "false");
      });
    });
  }
  document.querySelectorAll("form.feedback").forEach(wireFeedback);

  // --- asking ----------------------------------------------------------------------------------------
  const form = document.getElementById("ask-form");
  const thread = document.getElementById("ask-thread");
  const statusLine = document.getElementById("ask-status");
  function status(text) { if (statusLine) statusLine.textContent = text; }
  if (!form || !thread) return;
  const field = (name) => form.elements.namedItem(name);
  const submit = form.querySelector("button[type=submit]");
  // The page sends the button disabled (a form sent without this script would be refused); it asks
  // now, unless the key is read-only (the page then disables the question too).
  if (!field("question").disabled) submit.disabled = false;

  const suggestions = document.getElementById("suggestions");
  if (suggestions) {
    suggestions.hidden = false;
    suggestions.querySelectorAll("button.suggestion").forEach((b) => {
      b.addEventListener("click", () => {
        field("question").value = b.dataset.question;
        field("about_kind").value = b.dataset.aboutKind;
        field("about_id").value = b.dataset.aboutId;
        field("about_database").value = b.dataset.aboutDatabase;
        field("question").focus();
      });
    });
  }

  function body() {
    const out = {question: field("question").value};
    const conv = field("conversation_id").value;
    if (conv) out.conversation_id = conv;
    const db = field("database") && field("database").value;
    if (db && !conv) out.database = db;
    if (field("deep").checked) out.deep = true;
    const kind = field("about_kind").value;
    if (kind) {
      out.about = {kind: kind, id: field("about_id").value};
      if (field("about_database").value) out.about.database = field("about_database").value;
    }
    return out;
  }

  // One answer as it arrives.
  function answerView() {
    const article = el("article", "msg msg-answer");
    article.setAttribute("aria-label", "Answer");
    const heading = el("h2", "visually-hidden", "Answer");
    const steps = el("ol", "tool-steps");
    const box = el("div", "answer");
    const sourcesHead = el("h3", "sub", "Sources");
    const sources = el("ul", "sources");
    const actions = el("ul", "ask-actions");
    const end = el("p", "muted");
    sourcesHead.hidden = sources.hidden = actions.hidden = steps.hidden = true;
    article.append(heading, steps, box, sourcesHead, sources, actions, end);
    const stepItems = {};
    let text = "";
    return {
      article: article,
      start(data) { article.id = "m-" + data.message_id; },
      tool(t) {
        let li = stepItems[t.id];
        if (!li) {
          li = stepItems[t.id] = el("li", "tool");
          li.append(el("span", "badge"), " ", el("bdi", "", t.label || t.name));
          steps.appendChild(li);
          steps.hidden = false;
        }
        li.className = "tool tool-" + t.status;
        li.firstChild.textContent = t.status;
      },
      text(piece) { text += piece; box.replaceChildren(render(text, ANSWER_HEADINGS)); },
      source(s) {
        const li = el("li");
        const href = sitePath(s.href);
        const label = el("bdi", "", s.label);
        if (href) { const a = el("a"); a.href = href; a.appendChild(label); li.appendChild(a); } else li.appendChild(label);
        sources.appendChild(li);
        sources.hidden = sourcesHead.hidden = false;
      },
      action(a) {
        const li = el("li");
        let href = sitePath(a.href);
        if (a.kind === "fix") {
          if (!href) {
            href = "/ui/databases/" + encodeURIComponent(a.database) + "/findings/" + encodeURIComponent(a.finding_id);
          }
          href += "#fix-" + encodeURIComponent(a.fix_id);
        }
        const label = el("bdi", "", a.label);
        if (href) {
          const link = el("a", "button secondary", a.kind === "fix" ? "Review the fix: " : "");
          link.href = href;
          link.appendChild(label);
          li.appendChild(link);
        } else li.appendChild(label);
        actions.appendChild(li);
        actions.hidden = false;
      },
      done(d) {
        end.replaceChildren("Answered by ", el("bdi", "", d.model), "." + (d.remaining >= 0
          ? " " + d.remaining.toLocaleString() + " built-in questions left this month."
          : " (the organization's own key)"));
      },
      error(e) {
        end.className = "error";
        end.replaceChildren("Failed (" + e.code + "): ", el("bdi", "", e.message));
      },
    };
  }

  // Server-sent events by hand (EventSource cannot POST): blocks end with a blank line, comment
  // lines start with ":", `data:` lines join with newlines.
  async function* events(resp) {
    const reader = resp.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, {stream: true}).replace(/\r\n?/g, "\n");
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        const data = block.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).replace(/^ /, ""));
        if (data.length) yield JSON.parse(data.join("\n"));
      }
    }
  }

  // The conversations beside the thread, as the conversation's own page lists them (title, time,
  // Delete): that page is read as an inert document (DOMParser runs no script) and its list moved
  // in, so every text in it is the server's escaped text, never a string put through innerHTML.
  async function refreshConversations(path) {
    const side = document.querySelector(".ask-side");
    const resp = await fetch(path, {credentials: "same-origin", headers: {"Accept": "text/html"}});
    if (!side || !resp.ok) return;
    const page = new DOMParser().parseFromString(await resp.text(), "text/html");
    const fresh = page.querySelector(".ask-side");
    if (fresh) side.replaceWith(document.adoptNode(fresh));
  }

  async function ask(event) {
    event.preventDefault();
    const question = body();
    if (!question.question.trim()) return;
    submit.disabled = true;
    const asked = el("article", "msg msg-user");
    asked.setAttribute("aria-label", "Question");
    asked.appendChild(el("p", "msg-text", question.question));
    thread.appendChild(asked);
    status("Asking...");
    try {
      const resp = await fetch(form.getAttribute("action"), {
        method: "POST",
        credentials: "same-origin",
        headers: {"Content-Type": "application/json", "Accept": "text/event-stream",
                  "X-CSRF-Token": field("csrf").value},
        body: JSON.stringify(question),
      });
      if (!(resp.headers.get("Content-Type") || "").startsWith("text/event-stream")) {
        let message = "Refused (" + resp.status + ")";
        try {
          const err = (await resp.json()).error;
          message = "Refused (" + err.code + "): " + err.message;
        } catch (e) { /* an HTML error page: the status says enough */ }
        const p = el("p", "error refusal", message);
        p.setAttribute("role", "alert");
        thread.appendChild(p);
        status(message);
        return;
      }
      const view = answerView();
      thread.appendChild(view.article);
      let conversation = null;
      let ended = false;
      for await (const data of events(resp)) {
        if (data.type === "start") { conversation = data.conversation_id; view.start(data); status("Answering..."); }
        else if (data.type === "tool") view.tool(data.tool);
        else if (data.type === "text") view.text(data.text);
        else if (data.type === "source") view.source(data.source);
        else if (data.type === "action") view.action(data.action);
        else if (data.type === "done") { view.done(data.done); ended = true; status("Done."); }
        else if (data.type === "error") { view.error(data.error); ended = true; status("The answer failed."); }
      }
      if (!ended) view.error({code: "disconnected", message: "the connection ended before the answer did"});
      if (conversation) {
        field("conversation_id").value = conversation;
        field("about_kind").value = ""; // the conversation now carries what it is about
        const aboutLine = document.getElementById("ask-about");
        if (aboutLine) aboutLine.hidden = true;
        // A reload shows the conversation, feedback buttons included.
        const path = "/ui/ask/" + encodeURIComponent(conversation);
        history.replaceState(null, "", path);
        refreshConversations(path).catch(() => { /* the list is as it was; a reload shows it */ });
      }
      field("question").value = "";
    } catch (err) {
      status("The answer could not be read: " + err);
    } finally {
      submit.disabled = false;
    }
  }
  form.addEventListener("submit", ask);
})();
