// The playground's channel page: polls /playground/state and renders it like Slack would.
//
// Safety: every piece of text from the server (messages, Block Kit, mrkdwn) becomes DOM
// through createElement/createTextNode/setAttribute; innerHTML is never used. mrkdwn is
// parsed into nodes (bold, italic, strike, code, pre, mentions, links, dates, emoji), and the
// three entities Slack uses (&lt; &gt; &amp;) are decoded into text nodes, so they show as the
// literal characters and can never become markup.
(() => {
  "use strict";

  const CONFIG = JSON.parse(document.getElementById("playground-config").textContent);
  const POLL_MS = CONFIG.pollMs || 700;
  const ERROR_SHOWN_MS = 12000;

  const EMOJI = {
    white_check_mark: "✅",
    heavy_check_mark: "✔️",
    no_entry: "⛔",
    no_entry_sign: "🚫",
    hourglass: "⌛",
    hourglass_flowing_sand: "⏳",
    raised_hand: "✋",
    hand: "✋",
    x: "❌",
    octagonal_sign: "🛑",
    warning: "⚠️",
    tada: "🎉",
    heavy_multiplication_x: "✖️",
    eyes: "👀",
    wave: "👋",
    thumbsup: "👍",
    "+1": "👍",
    rocket: "🚀",
    fire: "🔥",
    lock: "🔒",
    robot_face: "🤖",
    information_source: "ℹ️",
    question: "❓",
    speech_balloon: "💬",
    repeat: "🔁",
    clock1: "🕐",
    gear: "⚙️",
    busts_in_silhouette: "👥",
    bell: "🔔",
    arrow_double_up: "⏫",
    unlock: "🔓",
    pencil2: "✏️",
    memo: "📝",
  };

  const names = {};
  const roles = {};
  for (const person of CONFIG.people) {
    names[person.id] = person.name;
    roles[person.id] = person.role;
  }
  names[CONFIG.bot.id] = CONFIG.bot.name;
  const channels = CONFIG.channels || {};
  const AVATAR_COLORS = ["#e8912d", "#2bac76", "#1264a3", "#9b59b6", "#cd2553", "#4a90a4"];

  // -- DOM helpers ----------------------------------------------------------------------------

  /** An element with attributes (set with setAttribute) and children (strings become text). */
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "className") el.className = value;
      else if (name === "text") el.textContent = value;
      else if (name.startsWith("on") && typeof value === "function") {
        el.addEventListener(name.slice(2).toLowerCase(), value);
      } else el.setAttribute(name, value === true ? "" : String(value));
    }
    append(el, children);
    return el;
  }

  function append(parent, children) {
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      parent.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return parent;
  }

  const $ = (selector, root = document) => root.querySelector(selector);

  // -- mrkdwn -----------------------------------------------------------------------------------

  function decodeEntities(text) {
    return text.replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&amp;/g, "&");
  }

  function emojify(text) {
    return text.replace(/:([a-z0-9_+-]+):/g, (match, name) => EMOJI[name] || match);
  }

  /** Plain words of mrkdwn: emoji shortcodes and entities, as a text node. */
  function words(text) {
    return document.createTextNode(decodeEntities(emojify(text)));
  }

  const INLINE = new RegExp(
    [
      "`([^`\\n]+)`", // 1: code
      "<([^<>\\n]+)>", // 2: <@U…>, <#C…>, <!…>, <https://…|label>
      "(?<![\\w*])\\*(?=\\S)([^*\\n]*?\\S)\\*(?![\\w*])", // 3: *bold*
      "(?<![\\w_])_(?=\\S)([^_\\n]*?\\S)_(?![\\w_])", // 4: _italic_
      "(?<![\\w~])~(?=\\S)([^~\\n]*?\\S)~(?![\\w~])", // 5: ~strike~
    ].join("|"),
    "g",
  );

  /** Inline mrkdwn (no code fences) as a list of nodes. */
  function inline(text, depth = 0) {
    const nodes = [];
    let cursor = 0;
    INLINE.lastIndex = 0;
    const matches = [...text.matchAll(INLINE)];
    for (const match of matches) {
      if (match.index < cursor) continue;
      if (match.index > cursor) nodes.push(words(text.slice(cursor, match.index)));
      const [whole, code, token, bold, italic, strike] = match;
      if (code !== undefined) nodes.push(h("code", {}, decodeEntities(code)));
      else if (token !== undefined) nodes.push(special(token));
      else if (depth > 4) nodes.push(words(whole));
      else if (bold !== undefined) nodes.push(h("b", {}, inline(bold, depth + 1)));
      else if (italic !== undefined) nodes.push(h("i", {}, inline(italic, depth + 1)));
      else if (strike !== undefined) nodes.push(h("s", {}, inline(strike, depth + 1)));
      cursor = match.index + whole.length;
    }
    if (cursor < text.length) nodes.push(words(text.slice(cursor)));
    return nodes;
  }

  /** What is inside <…>: a mention, a channel, a group, a date, a link. */
  function special(token) {
    const bar = token.indexOf("|");
    const target = bar >= 0 ? token.slice(0, bar) : token;
    const label = bar >= 0 ? decodeEntities(token.slice(bar + 1)) : null;
    let match;
    if ((match = /^@([UW][A-Z0-9]+)$/.exec(target))) {
      const id = match[1];
      const cls = id === me ? "mention mention-me" : "mention";
      const name = names[id] || (label ? label.replace(/^@/, "") : id);
      return h("span", { className: cls, "data-user": id, title: id }, "@" + name);
    }
    if ((match = /^!subteam\^([A-Z0-9]+)$/.exec(target))) {
      const handle = label ? label.replace(/^@/, "") : "group";
      return h("span", { className: "mention group", title: match[1] }, "@" + handle);
    }
    if ((match = /^#([CG][A-Z0-9]+)$/.exec(target))) {
      const name = channels[match[1]] || (label ? label.replace(/^#/, "") : match[1]);
      return h("span", { className: "mention channel-ref", title: match[1] }, "#" + name);
    }
    if ((match = /^!(here|channel|everyone)$/.exec(target))) {
      return h("span", { className: "mention broadcast" }, "@" + match[1]);
    }
    if (target.startsWith("!date^")) {
      const [, epoch, format] = target.split("^");
      const fallback = label || "";
      return h("time", { title: fallback }, formatDate(Number(epoch), format || "", fallback));
    }
    const url = decodeEntities(target);
    const permalink = PERMALINK.exec(url);
    if (permalink && permalink[1] === CONFIG.channel.id) {
      // A link to a message of this channel (a card): jump to it here, not to slack.com.
      const ts = `${permalink[2]}.${permalink[3]}`;
      return h(
        "a",
        {
          href: `#message-${ts}`,
          className: "permalink",
          onclick: (event) => {
            event.preventDefault();
            jumpTo(ts);
          },
        },
        label || url,
      );
    }
    if (/^(https?:\/\/|mailto:)/i.test(url)) {
      return h("a", { href: url, target: "_blank", rel: "noopener noreferrer" }, label || url);
    }
    return words("<" + token + ">");
  }

  const PERMALINK = /^https:\/\/[\w-]+\.slack\.com\/archives\/([A-Z0-9]+)\/p(\d+)(\d{6})(?:\?.*)?$/;

  function jumpTo(ts) {
    const target = document.querySelector(`[data-testid="message"][data-ts="${CSS.escape(ts)}"]`);
    if (!target) {
      showError("That message is not in this channel any more.");
      return;
    }
    target.scrollIntoView({ block: "center", behavior: "smooth" });
    flash(target);
  }

  /** Slack's <!date^…^{date_short_pretty} at {time}|fallback>, in the reader's time zone. */
  function formatDate(epoch, format, fallback) {
    if (!Number.isFinite(epoch)) return fallback;
    const date = new Date(epoch * 1000);
    const day = (d) => new Date(d.getFullYear(), d.getMonth(), d.getDate()).getTime();
    const diffDays = Math.round((day(date) - day(new Date())) / 86400000);
    const pretty = { 0: "today", [-1]: "yesterday", 1: "tomorrow" }[diffDays];
    const dateIn = (options) => date.toLocaleDateString(undefined, options);
    const pad = (n) => String(n).padStart(2, "0");
    const tokens = {
      date_num: `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}`,
      date: dateIn({ year: "numeric", month: "long", day: "numeric" }),
      date_short: dateIn({ year: "numeric", month: "short", day: "numeric" }),
      date_long: dateIn({ weekday: "long", year: "numeric", month: "long", day: "numeric" }),
      time: date.toLocaleTimeString(undefined, { hour: "numeric", minute: "2-digit" }),
      time_secs: date.toLocaleTimeString(undefined, {
        hour: "numeric",
        minute: "2-digit",
        second: "2-digit",
      }),
      ago: relative(date),
    };
    tokens.date_pretty = pretty || tokens.date;
    tokens.date_short_pretty = pretty || tokens.date_short;
    tokens.date_long_pretty = pretty || tokens.date_long;
    const text = format.replace(/\{(\w+)\}/g, (m, name) => tokens[name] ?? m);
    if (!text) return fallback;
    return text.charAt(0).toUpperCase() + text.slice(1);
  }

  function relative(date) {
    const seconds = Math.round((date.getTime() - Date.now()) / 1000);
    const format = new Intl.RelativeTimeFormat(undefined, { numeric: "auto" });
    const units = [
      ["day", 86400],
      ["hour", 3600],
      ["minute", 60],
    ];
    for (const [unit, size] of units) {
      if (Math.abs(seconds) >= size) return format.format(Math.round(seconds / size), unit);
    }
    return format.format(seconds, "second");
  }

  /** A whole mrkdwn string: ```pre``` blocks, then inline formatting; newlines kept by CSS. */
  function mrkdwn(text) {
    const box = h("div", { className: "mrkdwn" });
    const parts = String(text || "").split("```");
    const closed = parts.length % 2 === 1;
    parts.forEach((part, index) => {
      const isPre = index % 2 === 1 && (closed || index < parts.length - 1);
      if (isPre) {
        const body = part.replace(/^\n/, "").replace(/\n$/, "");
        box.append(h("pre", {}, decodeEntities(body)));
      } else {
        append(box, inline(index % 2 === 1 ? "```" + part : part));
      }
    });
    return box;
  }

  /** A Block Kit text object: mrkdwn, or plain_text (emoji shortcodes unless emoji:false). */
  function textObject(object) {
    if (!object) return document.createTextNode("");
    if (object.type === "mrkdwn") return mrkdwn(object.text);
    const text = object.emoji === false ? object.text : emojify(object.text || "");
    return h("span", { className: "plain" }, text);
  }

  function plain(object) {
    if (!object) return "";
    return object.emoji === false ? object.text || "" : emojify(object.text || "");
  }

  // -- Block Kit --------------------------------------------------------------------------------

  /** Blocks as DOM. ``where`` says what a button click means: {channel, ts} or {modal}. */
  function renderBlocks(blocks, where) {
    const box = h("div", { className: "blocks" });
    let previousCode = false;
    for (const block of blocks || []) {
      const el = renderBlock(block, where);
      // A long value split over several sections (the Arguments modal) reads as one box.
      const code = isCodeSection(block);
      if (code && previousCode) el.classList.add("code-continued");
      previousCode = code;
      box.append(el);
    }
    return box;
  }

  function isCodeSection(block) {
    if (block.type !== "section" || !block.text || block.fields || block.accessory) return false;
    const text = block.text.text || "";
    return text.startsWith("```") && text.endsWith("```") && text.split("```").length === 3;
  }

  function renderBlock(block, where) {
    const attrs = { "data-block-id": block.block_id, "data-block-type": block.type };
    switch (block.type) {
      case "section": {
        const main = h("div", { className: "section-main" });
        if (block.text) main.append(textObject(block.text));
        if (block.fields && block.fields.length) {
          main.append(
            h(
              "div",
              { className: "fields" },
              block.fields.map((field) => h("div", { className: "field" }, textObject(field))),
            ),
          );
        }
        const accessory = block.accessory
          ? h("div", { className: "accessory" }, renderElement(block.accessory, block, where))
          : null;
        return h("div", { className: "block section", ...attrs }, main, accessory);
      }
      case "context":
        return h(
          "div",
          { className: "block context", ...attrs },
          (block.elements || []).map((element) =>
            element.type === "image"
              ? h("span", { className: "image-alt" }, "🖼 " + (element.alt_text || ""))
              : h("span", { className: "context-item" }, textObject(element)),
          ),
        );
      case "actions":
        return h(
          "div",
          { className: "block actions", ...attrs },
          (block.elements || []).map((element) => renderElement(element, block, where)),
        );
      case "divider":
        return h("hr", { className: "block divider", ...attrs });
      case "header":
        return h("h3", { className: "block header", ...attrs }, plain(block.text));
      case "input":
        return renderInput(block, attrs);
      case "image":
        return h(
          "div",
          { className: "block image-alt", ...attrs },
          "🖼 " + (block.alt_text || "image"),
        );
      case "rich_text":
        return h("div", { className: "block rich-text", ...attrs }, richText(block.elements));
      default:
        return h(
          "div",
          { className: "block unsupported", ...attrs },
          `(a ${block.type} block, which the playground does not show)`,
        );
    }
  }

  /** rich_text, roughly: sections, preformatted, quotes, lists and their inline elements. */
  function richText(elements) {
    return (elements || []).map((element) => {
      const children = richInline(element.elements || []);
      switch (element.type) {
        case "rich_text_preformatted":
          return h("pre", {}, children);
        case "rich_text_quote":
          return h("blockquote", {}, children);
        case "rich_text_list":
          return h(
            element.style === "ordered" ? "ol" : "ul",
            {},
            (element.elements || []).map((item) => h("li", {}, richInline(item.elements || []))),
          );
        default:
          return h("div", { className: "mrkdwn" }, children);
      }
    });
  }

  function richInline(elements) {
    return elements.map((element) => {
      let node;
      switch (element.type) {
        case "text":
          node = document.createTextNode(element.text || "");
          break;
        case "user":
          node = special("@" + element.user_id);
          break;
        case "usergroup":
          node = special("!subteam^" + element.usergroup_id);
          break;
        case "channel":
          node = special("#" + element.channel_id);
          break;
        case "link":
          node = special(element.url + (element.text ? "|" + element.text : ""));
          break;
        case "emoji":
          node = document.createTextNode(EMOJI[element.name] || `:${element.name}:`);
          break;
        default:
          node = document.createTextNode("");
      }
      const style = element.style || {};
      if (style.code) node = h("code", {}, node);
      if (style.bold) node = h("b", {}, node);
      if (style.italic) node = h("i", {}, node);
      if (style.strike) node = h("s", {}, node);
      return node;
    });
  }

  function renderSelect(element, block, where) {
    const placeholder = element.placeholder ? plain(element.placeholder) : "Choose";
    const select = h(
      "select",
      {
        className: "select",
        "data-action-id": element.action_id,
        "data-block-id": block.block_id,
        "aria-label": placeholder,
      },
      h("option", { value: "", disabled: true }, placeholder),
      ...(element.options || []).map((option) =>
        h("option", { value: plain(option.text) }, plain(option.text)),
      ),
    );
    select.value = "";
    select.addEventListener("change", () => onSelect(element, where, select));
    return select;
  }

  function renderElement(element, block, where) {
    if (element.type === "static_select") return renderSelect(element, block, where);
    if (element.type !== "button") {
      return h(
        "span",
        { className: "unsupported-element" },
        `(${element.type}: not in the playground)`,
      );
    }
    const style = element.style === "primary" || element.style === "danger" ? element.style : "";
    const button = h(
      "button",
      {
        type: "button",
        className: style ? `btn btn-${style}` : "btn",
        "data-action-id": element.action_id,
        "data-value": element.value,
        "data-block-id": block.block_id,
        "data-style": style || null,
      },
      plain(element.text),
    );
    button.addEventListener("click", () => onButton(element, where, button));
    return button;
  }

  function renderInput(block, attrs) {
    const element = block.element || {};
    const id = `input-${block.block_id}`;
    const label = h(
      "label",
      { for: id, className: "input-label" },
      plain(block.label),
      block.optional ? h("span", { className: "optional" }, " (optional)") : null,
    );
    let field;
    if (element.type === "plain_text_input") {
      const common = {
        id,
        name: block.block_id,
        "data-block-id": block.block_id,
        "data-action-id": element.action_id,
        placeholder: element.placeholder ? plain(element.placeholder) : null,
        maxlength: element.max_length || null,
        minlength: element.min_length || null,
        required: !block.optional,
      };
      field = element.multiline
        ? h("textarea", { ...common, rows: 4 })
        : h("input", { ...common, type: "text" });
      if (element.initial_value) field.value = element.initial_value;
    } else if (element.type === "static_select") {
      // A menu in a form (an enum of the edit form): its choice is sent as selected_option.
      field = h(
        "select",
        {
          id,
          className: "select",
          name: block.block_id,
          "data-block-id": block.block_id,
          "data-action-id": element.action_id,
          "data-element-type": "static_select",
          required: !block.optional,
        },
        h("option", { value: "" }, element.placeholder ? plain(element.placeholder) : "Choose"),
        ...(element.options || []).map((option) =>
          h("option", { value: option.value }, plain(option.text)),
        ),
      );
      field.value = element.initial_option ? element.initial_option.value : "";
    } else {
      field = h("div", { className: "unsupported-element" }, `(${element.type}: not supported)`);
    }
    return h(
      "div",
      { className: "block input", ...attrs },
      label,
      field,
      block.hint ? h("div", { className: "input-hint" }, plain(block.hint)) : null,
      h("div", { className: "input-error", role: "alert", "data-error-for": block.block_id }),
    );
  }

  // -- state, messages and threads ----------------------------------------------------------

  const identity = $('[data-testid="identity"]');
  const list = $('[data-testid="messages"]');
  const empty = $('[data-testid="empty"]');
  const composer = $('[data-testid="composer"]');
  const composerForm = $('[data-testid="composer-form"]');
  const replyTarget = $('[data-testid="reply-target"]');
  const errorBox = $('[data-testid="error"]');
  const switchTip = $('[data-testid="switch-tip"]');
  const overlays = document.getElementById("overlays");

  let me = identity.value;
  let replyTo = null; // ts of the thread the composer replies in
  let lastStateText = null;
  let lastState = null;
  let conversations = new Map(); // ts -> {el, sig, messageEl, thread, threadList, replies}
  let modalKey = null; // "viewId:hash" of the modal on screen
  let dismissedKey = null; // a modal closed here, until the server agrees
  let errorTimer = null;

  function messageSig(message) {
    const { replies, ...rest } = message;
    return JSON.stringify(rest);
  }

  function avatar(message) {
    if (message.bot) return h("div", { className: "avatar bot", "aria-hidden": "true" }, "✓");
    const index = Math.max(
      0,
      CONFIG.people.findIndex((p) => p.id === message.user),
    );
    return h(
      "div",
      {
        className: "avatar",
        "aria-hidden": "true",
        style: `background:${AVATAR_COLORS[index % AVATAR_COLORS.length]}`,
      },
      (message.name || "?").charAt(0).toUpperCase(),
    );
  }

  function timeOf(ts) {
    const date = new Date(Number(ts) * 1000);
    return date.toLocaleTimeString(undefined, { hour: "numeric", minute: "2-digit" });
  }

  /** The whole date and time of a ts, as Slack shows when hovering a message's time. */
  function fullTimeOf(ts) {
    const date = new Date(Number(ts) * 1000);
    return date.toLocaleString(undefined, {
      weekday: "long",
      year: "numeric",
      month: "long",
      day: "numeric",
      hour: "numeric",
      minute: "2-digit",
      second: "2-digit",
    });
  }

  function onlyRichText(blocks) {
    return blocks.length > 0 && blocks.every((block) => block.type === "rich_text");
  }

  const TASK_ICONS = { pending: "○", in_progress: "◐", complete: "✓", error: "✕" };

  /** A streamed answer (chat.startStream): its blocks (Pause, Stop), a task per tool call
   *  with its status, the text streamed so far, and a cursor while it still streams. */
  function renderStream(message, where) {
    const blocks = message.blocks || [];
    const tasks = message.tasks || [];
    return h(
      "div",
      { className: "stream", "data-testid": "stream", "data-stream": message.stream },
      blocks.length ? renderBlocks(blocks, where) : null,
      tasks.length
        ? h(
            "ul",
            { className: "stream-tasks", "data-testid": "stream-tasks" },
            tasks.map((task) =>
              h(
                "li",
                {
                  className: `stream-task task-${task.status}`,
                  "data-testid": "stream-task",
                  "data-status": task.status,
                },
                h("span", { className: "task-icon", "aria-hidden": "true" }, TASK_ICONS[task.status] || "·"),
                h("span", { className: "task-title" }, task.title),
                task.output ? h("span", { className: "task-output" }, " — ", mrkdwn(task.output)) : null,
                task.details && task.status === "in_progress"
                  ? h("span", { className: "task-output", "data-testid": "task-details" }, " — ", task.details)
                  : null,
              ),
            ),
          )
        : null,
      h("div", { className: "stream-text", "data-testid": "stream-text" }, mrkdwn(message.text || "")),
      message.stream === "streaming"
        ? h("span", { className: "stream-cursor", "data-testid": "stream-cursor", "aria-label": "still writing" }, "▍")
        : null,
    );
  }

  function renderMessage(message, isReply) {
    const classes = ["message"];
    if (message.bot) classes.push("from-bot");
    if (message.ephemeral) classes.push("ephemeral");
    const where = { channel: message.channel || CONFIG.channel.id, ts: message.ts };
    const blocks = message.blocks || [];
    const content = message.stream
      ? renderStream(message, where)
      : blocks.length && !onlyRichText(blocks)
        ? renderBlocks(blocks, where)
        : mrkdwn(message.text);
    const meta = h(
      "div",
      { className: "meta" },
      h("span", { className: "author" }, message.name),
      message.bot ? h("span", { className: "app-badge", title: "An app" }, "APP") : null,
      !message.bot && roles[message.user]
        ? h("span", { className: "role-tag" }, roles[message.user])
        : null,
      h(
        "time",
        {
          className: "ts",
          "data-testid": "ts",
          datetime: new Date(Number(message.ts) * 1000).toISOString(),
          title: fullTimeOf(message.ts),
        },
        timeOf(message.ts),
      ),
      message.edited ? h("span", { className: "edited", "data-testid": "edited" }, "(edited)") : null,
    );
    const body = h(
      "div",
      { className: "body" },
      message.ephemeral
        ? h(
            "div",
            { className: "ephemeral-note", "data-testid": "ephemeral-note" },
            h("span", { "aria-hidden": "true" }, "👁 "),
            "Only visible to you",
          )
        : null,
      meta,
      h("div", { className: "content" }, content),
    );
    const actions =
      !isReply && !message.ephemeral
        ? h(
            "div",
            { className: "hover-actions" },
            h(
              "button",
              {
                type: "button",
                className: "reply-button",
                "data-testid": "reply-in-thread",
                onclick: () => startReply(message),
              },
              "💬 Reply in thread",
            ),
          )
        : null;
    return h(
      "div",
      {
        className: classes.join(" "),
        "data-testid": "message",
        "data-ts": message.ts,
        "data-user": message.user,
        "data-thread-ts": message.thread_ts,
        "data-ephemeral": message.ephemeral ? "true" : null,
        "data-edited": message.edited ? "true" : null,
        role: "article",
        "aria-label": `${message.name} at ${timeOf(message.ts)}`,
      },
      avatar(message),
      body,
      actions,
    );
  }

  function flash(el) {
    el.classList.remove("flash");
    void el.offsetWidth; // restart the animation
    el.classList.add("flash");
  }

  /** Keep ``container``'s children equal to ``items`` (by ts), rebuilding only what changed. */
  function syncChildren(container, cache, items, create, update) {
    const seen = new Set();
    let cursor = container.firstElementChild;
    for (const item of items) {
      seen.add(item.ts);
      let entry = cache.get(item.ts);
      const sig = messageSig(item);
      if (!entry) {
        entry = create(item, sig);
        cache.set(item.ts, entry);
      } else if (entry.sig !== sig) {
        const wasCursor = entry.el === cursor;
        update(entry, item, sig); // may replace entry.el where it stands
        if (wasCursor) cursor = entry.el;
      }
      if (entry.el !== cursor) container.insertBefore(entry.el, cursor);
      else cursor = cursor.nextElementSibling;
    }
    for (const [ts, entry] of cache) {
      if (!seen.has(ts)) {
        entry.el.remove();
        cache.delete(ts);
      }
    }
  }

  // Threads folded by the reader, kept for the tab's life (a reload keeps them folded).
  const collapsed = new Set(JSON.parse(sessionStorage.getItem("playground:collapsed") || "[]"));

  function showCollapsed(entry, folded) {
    entry.thread.classList.toggle("collapsed", folded);
    entry.toggle.setAttribute("aria-expanded", folded ? "false" : "true");
    entry.toggle.title = folded ? "Show the thread" : "Hide the thread";
  }

  function setCollapsed(ts, folded) {
    if (folded) collapsed.add(ts);
    else collapsed.delete(ts);
    sessionStorage.setItem("playground:collapsed", JSON.stringify([...collapsed]));
    const entry = conversations.get(ts);
    if (entry) showCollapsed(entry, folded);
    if (lastState) {
      lastStateText = null; // re-render the counts
      renderState(lastState);
    }
  }

  function createReply(message, sig) {
    return { el: renderMessage(message, true), sig };
  }

  function updateReply(entry, message, sig) {
    const fresh = renderMessage(message, true);
    entry.el.replaceWith(fresh);
    entry.el = fresh;
    entry.sig = sig;
    flash(fresh);
  }

  function createConversation(message, sig) {
    const messageEl = renderMessage(message, false);
    const count = h("span", { className: "reply-count" });
    const threadList = h("div", { className: "thread-list" });
    const replyLink = h(
      "button",
      {
        type: "button",
        className: "thread-reply",
        "data-testid": "thread-reply",
        onclick: () => startReply(message),
      },
      "Reply…",
    );
    const toggle = h(
      "button",
      {
        type: "button",
        className: "thread-head",
        "data-testid": "thread-toggle",
        "aria-expanded": "true",
        onclick: () => setCollapsed(message.ts, !collapsed.has(message.ts)),
      },
      h("span", { className: "chevron", "aria-hidden": "true" }, "▾"),
      count,
    );
    const thread = h(
      "div",
      { className: "thread", "data-testid": "thread", "data-thread-ts": message.ts, hidden: true },
      toggle,
      threadList,
      replyLink,
    );
    const el = h(
      "div",
      { className: "conversation", "data-testid": "conversation", "data-ts": message.ts },
      messageEl,
      thread,
    );
    const entry = { el, sig, messageEl, thread, threadList, count, toggle, replies: new Map() };
    showCollapsed(entry, collapsed.has(message.ts));
    return entry;
  }

  function updateConversation(entry, message, sig) {
    const fresh = renderMessage(message, false);
    entry.messageEl.replaceWith(fresh);
    entry.messageEl = fresh;
    entry.sig = sig;
    flash(fresh);
  }

  function renderState(state) {
    const nearBottom = list.scrollHeight - list.scrollTop - list.clientHeight < 120;
    const firstRender = lastState === null;
    syncChildren(list, conversations, state.messages, createConversation, updateConversation);
    for (const message of state.messages) {
      const entry = conversations.get(message.ts);
      const replies = message.replies || [];
      syncChildren(entry.threadList, entry.replies, replies, createReply, updateReply);
      const shared = replies.filter((reply) => !reply.ephemeral).length;
      entry.thread.hidden = replies.length === 0;
      entry.count.textContent = shared === 1 ? "1 reply" : `${shared} replies`;
      if (collapsed.has(message.ts)) {
        const last = replies.length ? replies[replies.length - 1] : null;
        entry.count.textContent += last ? ` · last from ${last.name} at ${timeOf(last.ts)}` : "";
      }
      entry.el.classList.toggle("replying", replyTo === message.ts);
    }
    empty.hidden = state.messages.length > 0;
    if (empty.hidden && empty.parentNode === list) empty.remove();
    if (!empty.hidden && empty.parentNode !== list) list.append(empty);
    if (replyTo && !conversations.has(replyTo)) stopReply();
    renderModal(state.modal);
    renderHome(state.home);
    renderDms(state.dms);
    renderPane(state.pane);
    renderWorkflow(state.workflow);
    renderSwitchTip(state);
    lastState = state;
    if (firstRender || nearBottom) list.scrollTop = list.scrollHeight;
  }

  /** "You can't approve this: switch to cy", when a card waits that you may not decide: names
   * someone who still can (the server reads who from the bot's pending approvals: in a
   * quorum an approver who has not voted, when an approver asked the other approver). */
  function renderSwitchTip(state) {
    let found = null;
    for (const card of state.waiting || []) {
      if (card.may_act.includes(me)) continue;
      const other = card.may_act.find((id) => id !== me && names[id]);
      if (other) {
        found = { card, other };
        break;
      }
    }
    const show = Boolean(found) && view === "channel";
    switchTip.hidden = !show;
    if (!show) return;
    const { card, other } = found;
    let why = "you are not one of its approvers";
    if (card.requester === me) why = "you asked for it, so you cannot approve it";
    else if (card.approved_by.includes(me)) why = "you approved it already; it needs another approval";
    $(".switch-tip-text", switchTip).textContent =
      `${card.tool} waits for a decision: ${why}. To decide it, switch to ${names[other]}.`;
    const button = $('[data-testid="switch-tip-button"]', switchTip);
    button.textContent = `Switch to ${names[other]}`;
    button.onclick = () => switchTo(other);
  }

  // -- the App Home ---------------------------------------------------------------------------

  const homeTab = $('[data-testid="home"]');
  const homeBlocks = $('[data-testid="home-blocks"]');
  const channelTitle = $(".channel-header h1");
  const channelTitleNodes = [...channelTitle.childNodes];
  // The view shown beside the channel: the App Home or the Workflow panel (?tab=…).
  const TABS = ["home", "workflow"];
  const wantedTab = new URL(window.location.href).searchParams.get("tab");
  let view = TABS.includes(wantedTab) ? wantedTab : "channel";
  let homeSig = null;

  /** The Home the bot published for you, rendered like a message's blocks; its buttons are
   * clicks on a view (POST /playground/home/click). */
  function renderHome(home) {
    const sig = home ? JSON.stringify(home) : "";
    if (sig === homeSig) return;
    homeSig = sig;
    homeBlocks.replaceChildren(
      home
        ? renderBlocks(home.blocks, { home: true })
        : h("p", { className: "home-loading", "data-testid": "home-loading" }, "Opening your Home…"),
    );
  }

  const dmList = $('[data-testid="dms"]');
  let dmSig = null;

  /** The app's Messages tab: the DMs the bot sent you (card copies, reminders). */
  function renderDms(dms) {
    const sig = JSON.stringify(dms || []);
    if (sig === dmSig) return;
    dmSig = sig;
    dmList.replaceChildren(
      ...(dms && dms.length
        ? dms.map((message) => renderMessage(message, true))
        : [h("p", { className: "home-loading", "data-testid": "dms-empty" }, "No messages from the app yet.")]),
    );
  }

  /** The agent pane (the Messages tab): the bot's suggested prompts and its status line. */
  let paneSig = null;
  function renderPane(pane) {
    const sig = JSON.stringify(pane || null);
    if (sig === paneSig) return;
    paneSig = sig;
    const statusLine = $('[data-testid="pane-status"]');
    const statuses = (pane && pane.statuses) || [];
    statusLine.hidden = !statuses.length;
    statusLine.textContent = statuses.map((s) => s.status).join(" · ");
    const prompts = (pane && pane.prompts) || null;
    $('[data-testid="pane-prompts"]').replaceChildren(
      ...(prompts
        ? [
            h("span", { className: "pane-prompts-title" }, prompts.title || ""),
            ...prompts.prompts.map((prompt) =>
              h(
                "button",
                {
                  type: "button",
                  className: "pane-prompt",
                  "data-testid": "pane-prompt",
                  onclick: () => sendToPane(prompt.message),
                },
                prompt.title,
              ),
            ),
          ]
        : []),
    );
  }

  async function sendToPane(text) {
    const result = await post("/playground/pane/message", { user: me, text });
    poll();
    return result;
  }

  $('[data-testid="pane-form"]').addEventListener("submit", async (event) => {
    event.preventDefault();
    const input = $('[data-testid="pane-input"]');
    const text = input.value.trim();
    if (!text) return;
    const result = await sendToPane(text);
    if (result.ok) input.value = "";
  });

  function showHomePane(pane) {
    for (const [testid, name] of [["home-tab-home", "home"], ["home-tab-messages", "messages"]]) {
      const button = $(`[data-testid="${testid}"]`);
      button.classList.toggle("active", pane === name);
      button.setAttribute("aria-selected", pane === name ? "true" : "false");
    }
    $('[data-testid="home-pane"]').hidden = pane !== "home";
    $('[data-testid="dm-pane"]').hidden = pane !== "messages";
  }
  $('[data-testid="home-tab-home"]').addEventListener("click", () => showHomePane("home"));
  $('[data-testid="home-tab-messages"]').addEventListener("click", async () => {
    showHomePane("messages");
    // Slack sends app_home_opened (tab "messages") each time; the bot sets its prompts.
    await post("/playground/pane/open", { user: me });
    poll();
  });

  function showView(wanted) {
    view = wanted;
    const home = view === "home";
    const workflow = view === "workflow";
    document.body.classList.toggle("on-home", home);
    document.body.classList.toggle("on-workflow", workflow);
    homeTab.hidden = !home;
    workflowTab.hidden = !workflow;
    $('[data-testid="open-home"]').classList.toggle("active", home);
    $('[data-testid="open-workflow"]').classList.toggle("active", workflow);
    $('[data-testid="open-channel"]').classList.toggle("active", view === "channel");
    let title = channelTitleNodes;
    if (home) title = [`${CONFIG.bot.name} · Home`];
    if (workflow) title = ["Workflow · Request approval"];
    channelTitle.replaceChildren(...title);
    const url = new URL(window.location.href);
    if (view !== "channel") url.searchParams.set("tab", view);
    else url.searchParams.delete("tab");
    window.history.replaceState(null, "", url);
    document.body.classList.remove("sidebar-open");
    if (home) openHome();
    else if (workflow) poll();
    if (lastState) renderSwitchTip(lastState);
  }

  async function openHome() {
    // Slack sends app_home_opened each time the tab is opened; the bot publishes the Home.
    await post("/playground/home/open", { user: me });
    poll();
  }

  $('[data-testid="open-home"]').addEventListener("click", (event) => {
    event.preventDefault();
    event.stopPropagation();
    showView("home");
  });
  $('[data-testid="open-channel"]').addEventListener("click", (event) => {
    event.preventDefault();
    event.stopPropagation();
    showView("channel");
  });
  $('[data-testid="open-workflow"]').addEventListener("click", (event) => {
    event.preventDefault();
    event.stopPropagation();
    showView("workflow");
  });

  // -- the Workflow panel ---------------------------------------------------------------------

  const workflowTab = $('[data-testid="workflow"]');
  const workflowForm = $('[data-testid="workflow-form"]');
  const workflowRuns = $('[data-testid="workflow-runs"]');
  const workflowApprovers = $('[data-testid="workflow-approvers"]');
  let workflowSig = null;

  /** The approvers to pick: the page's people but you (you run it: you cannot approve it). */
  function renderWorkflowApprovers() {
    workflowApprovers.replaceChildren(
      ...CONFIG.people
        .filter((person) => person.id !== me)
        .map((person) =>
          h(
            "label",
            { className: "workflow-approver" },
            h("input", {
              type: "checkbox",
              value: person.id,
              "data-testid": "workflow-approver",
              "aria-label": person.name,
            }),
            ` ${person.name} `,
            h("span", { className: "role" }, person.role),
          ),
        ),
    );
  }

  /** The step's runs, newest first, each with its completion as the stand-in recorded it
   * (functions.completeSuccess with the outputs, or functions.completeError). */
  function renderWorkflow(workflow) {
    const sig = JSON.stringify(workflow || null);
    if (sig === workflowSig) return;
    workflowSig = sig;
    const available = Boolean(workflow && workflow.available);
    const unavailable = $('[data-testid="workflow-unavailable"]');
    unavailable.hidden = available;
    unavailable.textContent = available
      ? ""
      : `No workflow to run here: ${(workflow && workflow.why) || "the page has no step"}.`;
    workflowForm.hidden = !available;
    const runs = (workflow && workflow.runs) || [];
    workflowRuns.replaceChildren(
      ...(runs.length
        ? runs.map(renderWorkflowRun)
        : [h("li", { className: "home-loading", "data-testid": "workflow-no-runs" }, "No runs yet.")]),
    );
  }

  function renderWorkflowRun(run) {
    const about = [`asked by ${run.requester}`, `approvers ${run.approvers.join(", ")}`, run.channel];
    if (run.timeout) about.push(`timeout ${run.timeout}`);
    return h(
      "li",
      { className: `workflow-run ${run.state}`, "data-testid": "workflow-run", "data-state": run.state },
      h("div", { className: "workflow-run-head" }, h("b", {}, run.title), ` · ${about.join(" · ")}`),
      run.details ? h("div", { className: "workflow-run-details" }, run.details) : null,
      h(
        "div",
        { className: "workflow-run-completion", "data-testid": "workflow-completion" },
        run.method ? h("code", {}, run.method) : null,
        run.method ? " " : null,
        run.completion,
      ),
    );
  }

  workflowForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    const button = $('[data-testid="workflow-submit"]');
    button.disabled = true;
    try {
      const result = await post("/playground/workflow/run", {
        user: me,
        title: $('[data-testid="workflow-title"]').value,
        details: $('[data-testid="workflow-details"]').value,
        approvers: [...workflowApprovers.querySelectorAll("input:checked")].map((i) => i.value),
        channel: $('[data-testid="workflow-channel"]').value,
        timeout: $('[data-testid="workflow-timeout"]').value,
      });
      if (result.ok) workflowForm.reset();
    } finally {
      button.disabled = false;
      poll();
    }
  });

  // -- polling ------------------------------------------------------------------------------

  let pollTimer = null;
  let polling = false;
  let pollAgain = false;

  async function poll() {
    clearTimeout(pollTimer);
    if (polling) {
      pollAgain = true;
      return;
    }
    polling = true;
    const asked = me;
    try {
      const response = await fetch(`/playground/state?user=${encodeURIComponent(asked)}`, {
        cache: "no-store",
      });
      const text = await response.text();
      document.body.classList.toggle("offline", !response.ok);
      if (response.ok && asked === me && text !== lastStateText) {
        renderState(JSON.parse(text));
        lastStateText = text; // only once shown: a failed render is retried
      }
    } catch (error) {
      if (error instanceof TypeError && /fetch/i.test(error.message)) {
        document.body.classList.add("offline");
      } else {
        console.error("playground: could not show the channel:", error);
      }
    } finally {
      polling = false;
      if (pollAgain) {
        pollAgain = false;
        poll();
      } else {
        pollTimer = setTimeout(poll, POLL_MS);
      }
    }
  }

  async function post(path, body) {
    let response;
    try {
      response = await fetch(path, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify(body),
      });
    } catch (error) {
      showError("The playground server is not answering.");
      return { ok: false };
    }
    let data;
    try {
      data = await response.json();
    } catch (error) {
      data = { ok: false, error: `HTTP ${response.status}` };
    }
    if (!response.ok || !data.ok) {
      showError(data.error || `HTTP ${response.status}`);
      return { ...data, ok: false };
    }
    hideError();
    return data;
  }

  function showError(text) {
    $(".error-text", errorBox).textContent = text;
    errorBox.hidden = false;
    clearTimeout(errorTimer);
    errorTimer = setTimeout(hideError, ERROR_SHOWN_MS);
  }

  function hideError() {
    errorBox.hidden = true;
  }

  $(".error-close", errorBox).addEventListener("click", hideError);

  // -- identity -------------------------------------------------------------------------------

  function becomes(user) {
    me = user;
    const url = new URL(window.location.href);
    url.searchParams.set("as", user);
    window.history.replaceState(null, "", url);
    document.body.dataset.user = user;
    markCurrentPerson();
    for (const entry of conversations.values()) entry.el.remove();
    conversations = new Map();
    closeConfirm(false);
    removeModal();
    dismissedKey = null;
    lastStateText = null;
    lastState = null;
    stopReply();
    hideError();
    homeSig = null;
    dmSig = null;
    workflowSig = null;
    renderWorkflowApprovers();
    if (view === "home") openHome();
    else poll();
  }

  identity.addEventListener("change", () => becomes(identity.value));

  function switchTo(user) {
    if (user === me) return;
    identity.value = user;
    becomes(user);
  }

  function markCurrentPerson() {
    for (const button of document.querySelectorAll('[data-testid="person"]')) {
      const current = button.dataset.user === me;
      button.classList.toggle("current", current);
      button.setAttribute("aria-pressed", current ? "true" : "false");
    }
  }

  for (const button of document.querySelectorAll('[data-testid="person"]')) {
    button.addEventListener("click", () => {
      switchTo(button.dataset.user);
      document.body.classList.remove("sidebar-open");
    });
  }

  for (const button of document.querySelectorAll(
    '[data-testid="example"], [data-testid="empty-example"]',
  )) {
    button.addEventListener("click", () => {
      composer.value = button.dataset.text;
      fitComposer();
      document.body.classList.remove("sidebar-open");
      composer.focus();
    });
  }

  const menu = $('[data-testid="menu"]');
  menu.addEventListener("click", (event) => {
    event.stopPropagation();
    const open = document.body.classList.toggle("sidebar-open");
    menu.setAttribute("aria-expanded", open ? "true" : "false");
  });
  // A tap beside the open drawer closes it, as on a phone.
  $(".main").addEventListener("click", () => {
    document.body.classList.remove("sidebar-open");
    menu.setAttribute("aria-expanded", "false");
  });

  $('[data-testid="reset-demo"]').addEventListener("click", async () => {
    const sure = await askConfirm({
      title: { type: "plain_text", text: "Reset the demo?" },
      text: {
        type: "mrkdwn",
        text: "Every message, run and approval is deleted and the pretend services start over. This cannot be undone.",
      },
      confirm: { type: "plain_text", text: "Reset" },
      deny: { type: "plain_text", text: "Cancel" },
      style: "danger",
    });
    if (!sure) return;
    const result = await post("/playground/reset", { confirm: "reset" });
    if (result.ok) {
      sessionStorage.clear();
      collapsed.clear();
      becomes(me);
    }
  });

  // -- composer -------------------------------------------------------------------------------

  function startReply(message) {
    replyTo = message.ts;
    const preview = (message.text || "").replace(/<@U0BOT>/g, "@" + CONFIG.bot.name);
    const short = preview.length > 60 ? preview.slice(0, 59) + "…" : preview;
    $(".reply-text", replyTarget).textContent = `Replying in thread to ${message.name}: ${
      decodeEntities(short)
    }`;
    replyTarget.hidden = false;
    composer.placeholder = "Reply in thread…";
    for (const [ts, entry] of conversations) entry.el.classList.toggle("replying", ts === replyTo);
    composer.focus();
  }

  function stopReply() {
    replyTo = null;
    replyTarget.hidden = true;
    composer.placeholder = `Message #${CONFIG.channel.name}`;
    for (const entry of conversations.values()) entry.el.classList.remove("replying");
  }

  $('[data-testid="reply-cancel"]').addEventListener("click", stopReply);

  function fitComposer() {
    composer.style.height = "auto";
    composer.style.height = Math.min(composer.scrollHeight, 200) + "px";
  }

  async function send() {
    const text = composer.value.trim();
    if (!text) return;
    composer.value = "";
    fitComposer();
    const body = { user: me, text };
    if (replyTo && !text.startsWith("/")) body.thread_ts = replyTo;
    const result = await post("/playground/message", body);
    if (!result.ok && !composer.value) {
      composer.value = text;
      fitComposer();
    }
    list.scrollTop = list.scrollHeight;
    poll();
  }

  composerForm.addEventListener("submit", (event) => {
    event.preventDefault();
    send();
  });
  composer.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      send();
    }
  });
  composer.addEventListener("input", fitComposer);

  // -- buttons and confirm dialogs ------------------------------------------------------------

  let confirmResolve = null;

  function closeConfirm(answer) {
    const open = $('[data-testid="confirm"]');
    if (open) open.closest(".overlay").remove();
    if (confirmResolve) {
      const resolve = confirmResolve;
      confirmResolve = null;
      resolve(answer);
    }
  }

  /** Slack's confirm object as a dialog; resolves true only on its confirm button. */
  function askConfirm(confirm) {
    closeConfirm(false);
    return new Promise((resolve) => {
      confirmResolve = resolve;
      const danger = confirm.style === "danger";
      const yes = h(
        "button",
        {
          type: "button",
          className: danger ? "btn btn-danger" : "btn btn-primary",
          "data-testid": "confirm-yes",
          onclick: () => closeConfirm(true),
        },
        plain(confirm.confirm) || "Yes",
      );
      const no = h(
        "button",
        {
          type: "button",
          className: "btn",
          "data-testid": "confirm-no",
          onclick: () => closeConfirm(false),
        },
        plain(confirm.deny) || "Cancel",
      );
      const dialog = h(
        "div",
        {
          className: "dialog confirm",
          "data-testid": "confirm",
          role: "alertdialog",
          "aria-modal": "true",
          "aria-labelledby": "confirm-title",
        },
        h("h2", { id: "confirm-title", className: "dialog-title" }, plain(confirm.title)),
        h("div", { className: "dialog-body" }, textObject(confirm.text)),
        h("div", { className: "dialog-footer" }, no, yes),
      );
      const overlay = h("div", { className: "overlay confirm-overlay" }, dialog);
      overlay.addEventListener("click", (event) => {
        if (event.target === overlay) closeConfirm(false);
      });
      overlay.addEventListener("keydown", (event) => {
        if (event.key === "Escape") closeConfirm(false);
      });
      overlays.append(overlay);
      yes.focus();
    });
  }

  async function onButton(element, where, button) {
    if (element.confirm && !(await askConfirm(element.confirm))) return;
    if (where.modal) {
      showError("Buttons inside dialogs are not supported by the playground.");
      return;
    }
    button.disabled = true;
    button.classList.add("busy");
    if (where.home) {
      await post("/playground/home/click", {
        user: me,
        action_id: element.action_id,
        value: element.value ?? null,
      });
    } else {
      await post("/playground/click", {
        user: me,
        channel: where.channel,
        ts: where.ts,
        action_id: element.action_id,
        value: element.value ?? null,
      });
    }
    button.disabled = false;
    button.classList.remove("busy");
    poll();
  }

  async function onSelect(element, where, select) {
    if (where.modal || where.home) {
      showError("Menus inside dialogs are not supported by the playground.");
      return;
    }
    // A menu with a confirm (Approve, and allow…) asks first, as Slack does.
    if (element.confirm && !(await askConfirm(element.confirm))) {
      select.value = "";
      return;
    }
    select.disabled = true;
    await post("/playground/select", {
      user: me,
      channel: where.channel,
      ts: where.ts,
      action_id: element.action_id,
      option: select.value,
    });
    select.disabled = false;
    poll();
  }

  // -- modals ---------------------------------------------------------------------------------

  function removeModal() {
    const open = $('[data-testid="modal"]');
    if (open) open.closest(".overlay").remove();
    modalKey = null;
  }

  function renderModal(modal) {
    const key = modal ? `${modal.id}:${modal.hash}` : null;
    if (key === modalKey) return; // unchanged: leave what is typed alone
    if (key !== null && key === dismissedKey) return; // closed here; the server will agree
    removeModal();
    if (!modal) {
      dismissedKey = null;
      return;
    }
    modalKey = key;
    const where = { modal: modal.id };
    const form = h(
      "form",
      {
        className: "dialog modal",
        "data-testid": "modal",
        "data-view-id": modal.id,
        role: "dialog",
        "aria-modal": "true",
        "aria-labelledby": "modal-title",
        novalidate: true,
      },
      h(
        "div",
        { className: "dialog-header" },
        h("h2", { id: "modal-title", className: "dialog-title" }, plain(modal.title)),
        h(
          "button",
          {
            type: "button",
            className: "icon-close",
            "aria-label": "Close",
            onclick: () => cancelModal(modal),
          },
          "×",
        ),
      ),
      h("div", { className: "dialog-body" }, renderBlocks(modal.blocks, where)),
      h(
        "div",
        { className: "dialog-footer" },
        h(
          "button",
          {
            type: "button",
            className: "btn",
            "data-testid": "modal-close",
            onclick: () => cancelModal(modal),
          },
          plain(modal.close) || (modal.submit ? "Cancel" : "Close"),
        ),
        modal.submit
          ? h(
              "button",
              { type: "submit", className: "btn btn-primary", "data-testid": "modal-submit" },
              plain(modal.submit),
            )
          : null,
      ),
    );
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      submitModal(modal, form);
    });
    restoreDraft(modal, form);
    form.addEventListener("input", () => saveDraft(modal, form));
    const overlay = h("div", { className: "overlay modal-overlay" }, form);
    overlay.addEventListener("keydown", (event) => {
      if (event.key === "Escape" && !$('[data-testid="confirm"]')) cancelModal(modal);
    });
    overlays.prepend(overlay);
    const first = $("textarea, input", form);
    (first || $("button", form)).focus();
  }

  // What was typed in an open modal, kept for the tab's life: a reload shows the modal again
  // (it is open until closed, as in Slack) with the text as it was.
  const draftKey = (modal) => `playground:draft:${modal.id}`;

  function saveDraft(modal, form) {
    const values = {};
    for (const field of form.querySelectorAll("textarea[data-block-id], input[data-block-id], select[data-block-id]")) {
      values[field.getAttribute("data-block-id")] = field.value;
    }
    sessionStorage.setItem(draftKey(modal), JSON.stringify(values));
  }

  function restoreDraft(modal, form) {
    let values = {};
    try {
      values = JSON.parse(sessionStorage.getItem(draftKey(modal)) || "{}") || {};
    } catch (error) {
      values = {};
    }
    for (const field of form.querySelectorAll("textarea[data-block-id], input[data-block-id], select[data-block-id]")) {
      const value = values[field.getAttribute("data-block-id")];
      if (typeof value === "string") field.value = value;
    }
  }

  function clearInputErrors(form) {
    for (const box of form.querySelectorAll(".input-error")) box.textContent = "";
  }

  function showInputError(form, blockId, text) {
    const box = form.querySelector(`[data-error-for="${CSS.escape(blockId)}"]`);
    if (box) box.textContent = text;
    else showError(text);
  }

  async function submitModal(modal, form) {
    clearInputErrors(form);
    const values = {};
    let missing = false;
    for (const field of form.querySelectorAll("[data-action-id][data-block-id]")) {
      if (!("value" in field) || field.tagName === "BUTTON") continue;
      const blockId = field.getAttribute("data-block-id");
      const actionId = field.getAttribute("data-action-id");
      const value = field.value;
      if (field.required && !value.trim()) {
        showInputError(form, blockId, "Please complete this required field.");
        missing = true;
      }
      const minLength = Number(field.getAttribute("minlength") || 0);
      if (value && value.length < minLength) {
        showInputError(form, blockId, `Please write at least ${minLength} characters.`);
        missing = true;
      }
      if (field.getAttribute("data-element-type") === "static_select") {
        const chosen = [...field.options].find((option) => option.value === value);
        values[blockId] = {
          [actionId]: {
            type: "static_select",
            selected_option: value
              ? { text: { type: "plain_text", text: chosen.textContent }, value }
              : null,
          },
        };
        continue;
      }
      values[blockId] = {
        [actionId]: { type: "plain_text_input", value: value === "" ? null : value },
      };
    }
    if (missing) return;
    const submit = $('[data-testid="modal-submit"]', form);
    if (submit) submit.disabled = true;
    const result = await post("/playground/submit", { user: me, view_id: modal.id, values });
    if (submit) submit.disabled = false;
    if (result.ok && result.status === "errors") {
      for (const [blockId, text] of Object.entries(result.errors || {})) {
        showInputError(form, blockId, String(text));
      }
      return;
    }
    if (result.ok) {
      dismissedKey = `${modal.id}:${modal.hash}`;
      sessionStorage.removeItem(draftKey(modal));
      removeModal();
    }
    poll();
  }

  async function cancelModal(modal) {
    dismissedKey = `${modal.id}:${modal.hash}`;
    sessionStorage.removeItem(draftKey(modal));
    removeModal();
    await post("/playground/close", { user: me, view_id: modal.id });
    poll();
  }

  // -- start ----------------------------------------------------------------------------------

  document.body.dataset.user = me;
  markCurrentPerson();
  stopReply();
  fitComposer();
  renderWorkflowApprovers();
  if (view !== "channel") showView(view);
  else poll();
})();
