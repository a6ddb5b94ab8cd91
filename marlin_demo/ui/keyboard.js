// Once per page, for a visitor on the keyboard:
// - a tab strip is one Tab stop (its selected tab); the arrow keys, Home and End move along it and open
//   the tab they reach (the WAI-ARIA tabs pattern; Gradio made every tab a stop of its own);
// - a radio group is one Tab stop whose arrow keys pick within it (Gradio names each radio apart, so the
//   browser saw three groups of one);
// - Run and Stop take each other's place while a request runs: the focus goes with them (to Stop as it
//   starts, back to Run when it ends) instead of falling to the page.
if (!window.__marlinKeys) {
  window.__marlinKeys = true;
  let groups = 0;
  const tabsOf = (list) => [...list.querySelectorAll(':scope > [role="tab"]')];
  const tidy = () => {
    document.querySelectorAll('[role="tablist"]').forEach((list) => {
      const tabs = tabsOf(list);
      const on = tabs.find((t) => t.getAttribute('aria-selected') === 'true') || tabs[0];
      tabs.forEach((t) => {
        const want = t === on ? '0' : '-1';
        if (t.getAttribute('tabindex') !== want) t.setAttribute('tabindex', want);
      });
    });
    document.querySelectorAll('fieldset').forEach((set) => {
      const radios = set.querySelectorAll('input[type="radio"]');
      if (radios.length < 2) return;
      set.dataset.marlinGroup ||= `marlin-radio-${++groups}`;
      radios.forEach((r) => { if (r.name !== set.dataset.marlinGroup) r.name = set.dataset.marlinGroup; });
    });
  };
  const STEPS = { ArrowRight: 1, ArrowLeft: -1, Home: 'first', End: 'last' };
  document.addEventListener('keydown', (ev) => {
    const button = ev.target.closest ? ev.target.closest('button') : null;
    // a held Enter repeats: its repeats must not press the Stop that took Run's place (nor Run again)
    if (ev.repeat && button && /-(run|stop)$/.test(button.id)) { ev.preventDefault(); return; }
    const tab = ev.target.closest ? ev.target.closest('[role="tab"]') : null;
    const step = STEPS[ev.key];
    if (!tab || !step) return;
    const tabs = tabsOf(tab.parentElement).filter((t) => !t.disabled && t.offsetParent !== null);
    const i = tabs.indexOf(tab);
    if (i < 0) return;
    const n = tabs.length;
    const k = step === 'first' ? 0 : step === 'last' ? n - 1 : (i + step + n) % n;
    ev.preventDefault();
    tabs[k].focus();
    tabs[k].click();
  });
  const RUN_STOP = /^(.+)-(run|stop)$/;
  let last = null;  // the Run or Stop button that had the focus last
  document.addEventListener('focusin', (ev) => {
    const el = ev.target;
    last = el instanceof HTMLButtonElement && RUN_STOP.test(el.id) ? el : null;
  });
  const usable = (el) => el && el.isConnected && el.offsetParent !== null && !el.disabled;
  const follow = () => {
    const here = document.activeElement;
    if (!last || (here && here !== document.body && here !== last) || usable(last)) return;
    const [, tab, kind] = last.id.match(RUN_STOP);
    const again = document.getElementById(last.id);  // the same button, drawn anew
    const other = document.getElementById(`${tab}-${kind === 'run' ? 'stop' : 'run'}`);
    const to = usable(again) ? again : usable(other) ? other : null;
    if (to) to.focus();
  };
  // tidy() at once: Gradio names a radio anew each time the selection changes, and an arrow key the
  // page handles before the next frame would find the radio alone in its group. The focus waits a frame.
  let queued = false;
  new MutationObserver(() => {
    tidy();
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => { queued = false; follow(); });
  }).observe(document.body, {
    childList: true, subtree: true, attributes: true,
    attributeFilter: ['aria-selected', 'name', 'class', 'style', 'hidden', 'disabled'],
  });
  tidy();
}
