const findVideo = () => {
  const sel = element.querySelector('.mt-timeline')?.dataset.player;
  const host = sel ? document.querySelector(sel) : null;
  return host && host.tagName !== 'VIDEO' ? host.querySelector('video') : host;
};
element.addEventListener('click', (ev) => {
  const item = ev.target.closest('[data-start]');
  if (!item || !element.contains(item)) return;
  const t = parseFloat(item.dataset.start);
  if (!Number.isFinite(t)) return;
  const video = findVideo();
  if (video) {
    video.currentTime = t;
    video.dataset.marlinSeek = String(t);
    const p = video.play();  // "Play from": it plays (a browser that refuses says nothing)
    if (p && p.catch) p.catch(() => {});
    const r = video.getBoundingClientRect();
    const away = r.top < 0 || r.bottom > window.innerHeight;
    if (away) video.scrollIntoView({ block: 'center', behavior: 'smooth' });
  }
  element.querySelectorAll('.mt-active').forEach((n) => n.classList.remove('mt-active'));
  item.classList.add('mt-active');
  showDetail(item);
});
// the full text of an event whose bar is too narrow for it (issue: labels were cut)
const showDetail = (item) => {
  const line = element.querySelector('.mt-detail');
  if (line && item && item.classList.contains('mt-event')) line.textContent = item.title;
};
// every bar's label whole, else its number, else none (the tooltip and the detail line say it): a label
// is never cut to "gr…"; a span's label that does not fit inside goes beside it
const overflows = (item) => item.scrollWidth > item.clientWidth + 1;
const fit = () => element.querySelectorAll('.mt-item').forEach((item) => {
  if (item.clientWidth === 0) return;  // a hidden tab: measured when it is shown
  if (item.classList.contains('mt-span')) {
    if (!item.classList.contains('mt-out') && overflows(item)) {
      item.classList.add('mt-out');
      if (parseFloat(item.style.left) + parseFloat(item.style.width) > 70) item.classList.add('mt-out-left');
    }
    return;
  }
  item.classList.remove('mt-fit-short', 'mt-fit-none');
  if (!overflows(item)) return;
  item.classList.add('mt-fit-short');
  if (overflows(item)) item.classList.replace('mt-fit-short', 'mt-fit-none');
});
new ResizeObserver(fit).observe(element);
new MutationObserver(fit).observe(element, { childList: true, subtree: true });
fit();
element.addEventListener('mouseover', (ev) => showDetail(ev.target.closest('.mt-event')));
element.addEventListener('focusin', (ev) => showDetail(ev.target.closest('.mt-event')));
setInterval(() => {
  const root = element.querySelector('.mt-timeline');
  const head = element.querySelector('.mt-playhead');
  if (!root || !head) return;
  const video = findVideo();
  const dur = parseFloat(root.dataset.duration);
  if (!video || !Number.isFinite(dur) || dur <= 0) { head.style.display = 'none'; return; }
  head.style.display = 'block';
  head.style.left = Math.min(100, 100 * video.currentTime / dur) + '%';
}, 200);
