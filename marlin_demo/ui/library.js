// The Library's gallery as a screen reader meets it: each thumbnail is named by its moment (clip, time
// and score, its visible caption), not Gradio's "Thumbnail 1 of 10"; the empty gallery's and player's
// boxes drop the aria-label a plain <div> may not carry (the component's own label names it). Gradio
// sets both again at each render, and may mount the tab anew: an observer on the page (the work is a
// few lookups) puts them back.
const named = () => {
  for (const item of document.querySelectorAll('#library-moments .thumbnail-item')) {
    const said = item.querySelector('.caption-label')?.textContent.trim();
    if (said && item.getAttribute('aria-label') !== said) item.setAttribute('aria-label', said);
  }
  // the empty gallery and the empty player: a plain <div> with Gradio's aria-label "Empty value"
  for (const box of document.querySelectorAll('#library-tab .empty[aria-label]')) {
    box.removeAttribute('aria-label');
  }
};
if (!window.__marlinLibraryNames) {
  window.__marlinLibraryNames = true;
  new MutationObserver(named).observe(document.body, {
    childList: true, subtree: true, attributes: true, attributeFilter: ['aria-label'],
  });
}
named();
