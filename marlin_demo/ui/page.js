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
      if (outOfView(target)) target.scrollIntoView({ block: 'start', behavior: 'smooth' });
    });
  };
  new MutationObserver(bring).observe(document.body, { childList: true, subtree: true });
}
