// Once per page: an element marked by scroll_mark() is brought into view the first time it appears
// out of view (a run's progress as it starts, its result when it ends), e.g. on a phone where the
// result sits under the inputs. Each mark is seen once, so redraws never fight the visitor's scrolling.
if (!window.__marlinScroll) {
  window.__marlinScroll = true;
  const seen = new Set();
  const tries = new Map();
  const outOfView = (el) => {
    const r = el.getBoundingClientRect();
    return r.height > 0 && (r.top < 0 || r.top > window.innerHeight - 60);
  };
  const bring = () => {
    document.querySelectorAll('[data-mr-scroll]').forEach((el) => {
      const mark = el.dataset.mrScroll;
      if (seen.has(mark) || el.offsetParent === null) return;
      let target = (el.dataset.mrTarget && document.querySelector(el.dataset.mrTarget)) || el;
      if (target.getBoundingClientRect().height === 0) {  // a target still being drawn: wait for it
        tries.set(mark, (tries.get(mark) || 0) + 1);
        if (tries.get(mark) < 40) return;
        target = el;
      }
      seen.add(mark);
      if (!outOfView(target)) return;
      // a little room above it: flush with the top, a pixel's shift later (a bar above redrawn, a fractional
      // position rounded) leaves its top edge cut off
      target.style.scrollMarginTop = '16px';
      target.scrollIntoView({ block: 'start', behavior: 'smooth' });
    });
  };
  new MutationObserver(bring).observe(document.body, { childList: true, subtree: true });
}
// A double-click on Run: its second click lands on Stop, which has taken Run's place, or on Run again
// when Stop is not drawn yet (the swap waits on the server): one run stopped, or two queued. style.css keeps
// Stop deaf for its first 0.4 s on screen, but a page busy at that moment (a long redraw) can hit-test the
// second click after that. So a click on a tab's Run or Stop is dropped when the visitor made it within
// 0.4 s of their last click on that tab's Run, by the events' own time (when the click happened, not when
// it was handled). Two exceptions, both clicks that are no double-click's second: another tab's Run, and
// a click on Run the browser counts as a single click (detail 1: a double-click's second counts 2; keys
// and scripts count 0), e.g. a program clicking Run again as soon as a run refused at once is over.
if (!window.__marlinRunClick) {
  window.__marlinRunClick = new Map();  // a tab's id prefix ("caption") -> its Run's last click time
  document.addEventListener('click', (ev) => {
    const button = ev.target instanceof Element ? ev.target.closest('button[id]') : null;
    const pair = button && /^(.+)-(run|stop)$/.exec(button.id);
    if (!pair) return;
    const run = pair[2] === 'run';
    const last = window.__marlinRunClick.get(pair[1]) ?? -Infinity;
    if (ev.timeStamp - last < 400 && !(run && ev.detail === 1)) {
      ev.stopImmediatePropagation();
      ev.preventDefault();
    } else if (run) window.__marlinRunClick.set(pair[1], ev.timeStamp);
  }, true);
}
