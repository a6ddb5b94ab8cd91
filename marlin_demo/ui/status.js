// Once per page: the browser's own "Video not playable" toast is replaced by the status line under the
// input (the server's sentence says what is wrong; a clip the server accepts but this browser cannot
// preview gets a note there instead), so a bad file is said once, next to the input.
if (!window.__marlinStatus) {
  window.__marlinStatus = true;
  const onlyUnplayable = (item) => {
    const lines = item.innerText.split('\n').map((l) => l.trim())
      .filter((l) => l && l !== '×' && !/^(error|\d+)$/i.test(l));
    return lines.length > 0 && lines.every((l) => l === 'Video not playable');
  };
  // Gradio's own refusal of a file by its type ("Only video/x-m4v,video/* allowed") becomes the app's
  // sentence in the clip's status line
  const typeRefused = (item) => /Only .*video.* allowed/i.test(item.innerText);
  const sayRefused = () => {
    const line = document.querySelector('#clip-status');
    if (!line) return;
    const div = document.createElement('div');
    div.className = 'ms-status ms-error';
    div.setAttribute('role', 'alert');
    div.textContent = 'This file is not a video: upload an MP4, WebM, MOV or MKV clip.';
    line.querySelector('.ms-status')?.remove();
    (line.querySelector('.prose') || line).appendChild(div);
  };
  new MutationObserver(() => {
    document.querySelectorAll('.toast-item').forEach((item) => {
      if (item.style.display === 'none') return;
      if (typeRefused(item)) { item.style.display = 'none'; sayRefused(); }
      else if (onlyUnplayable(item)) item.style.display = 'none';
    });
  }).observe(document.body, { childList: true, subtree: true });
  document.addEventListener('error', (ev) => {
    const v = ev.target;
    if (!v || v.tagName !== 'VIDEO') return;
    const host = v.closest('[id$="-video"]');
    if (!host) return;
    const ok = document.querySelector('#' + host.id.replace(/-video$/, '-status') + ' .ms-ok');
    if (ok && !ok.dataset.nopreview) {
      ok.dataset.nopreview = '1';
      ok.textContent += ' This browser cannot preview it; the model can still read it.';
    }
  }, true);
}
