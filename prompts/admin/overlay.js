// The stream overlay (an OBS browser source): shows what is answered and speaks the answer.
// Events come over SSE (EventSource reconnects by itself and sends the last event id, so the
// server resumes after it); items play one after another, each cut at its max duration.
"use strict";
(function () {
  const key = new URLSearchParams(location.search).get("key") || "";
  const audio = document.getElementById("voice");
  const card = document.getElementById("card");
  const who = document.getElementById("who");
  const said = document.getElementById("said");
  const answer = document.getElementById("answer");
  const queue = [];
  let current = null;
  let paused = false;
  let volume = 1;
  let cut = null;
  let shownFor = null;
  // What the page did, for whoever drives it (tests read it through the page).
  const state = { played: [], shown: [], skipped: [], events: 0, started: [], notices: [] };
  window.chorusOverlay = state;

  function show(item) {
    card.hidden = false;
    if (item.kind === "answer") {
      if (shownFor !== item.answer_to) {
        shownFor = item.answer_to;
        who.textContent = item.name;
        said.textContent = item.message;
        answer.textContent = "";
      }
      answer.textContent = (answer.textContent ? answer.textContent + " " : "") + item.text;
    } else {
      shownFor = null;
      who.textContent = "";
      said.textContent = "";
      answer.textContent = item.text;
    }
    state.shown.push(item.text);
  }

  function finish(ended) {
    if (!current) return;
    clearTimeout(cut);
    const record = { id: current.id, text: current.text, seconds: current.seconds,
      duration: audio.duration, ended: ended, provider: current.provider };
    (ended ? state.played : state.skipped).push(record);
    current = null;
    if (!queue.length) card.hidden = true;
    next();
  }

  function next() {
    if (current || paused || !queue.length) return;
    current = queue.shift();
    show(current);
    audio.src = current.audio;
    audio.volume = volume;
    const started = audio.play();
    if (started) started.then(() => state.started.push({ id: current && current.id, at: Date.now() }),
      () => { audio.pause(); finish(false); });
    cut = setTimeout(() => { audio.pause(); finish(false); }, current.max_seconds * 1000);
  }

  function stop() {
    audio.pause();
    audio.removeAttribute("src");
    finish(false);
  }

  audio.addEventListener("ended", () => finish(true));
  audio.addEventListener("error", () => finish(false));

  const source = new EventSource(location.pathname + "/events?key=" + encodeURIComponent(key));
  source.addEventListener("say", (event) => {
    state.events += 1;
    const item = JSON.parse(event.data);
    item.id = event.lastEventId;
    queue.push(item);
    next();
  });
  source.addEventListener("notice", (event) => {
    const text = JSON.parse(event.data).text;
    state.notices.push(text);
    if (!current) {
      who.textContent = "";
      said.textContent = "";
      answer.textContent = text;
      card.hidden = false;
      setTimeout(() => { if (!current) card.hidden = true; }, 6000);
    }
  });
  source.addEventListener("skip", () => { if (current) stop(); });
  source.addEventListener("pause", () => { paused = true; queue.length = 0; if (current) stop(); card.hidden = true; });
  source.addEventListener("resume", () => { paused = false; next(); });
  source.addEventListener("volume", (event) => {
    volume = Math.max(0, Math.min(100, JSON.parse(event.data).volume)) / 100;
    audio.volume = volume;
  });
})();
