element.addEventListener('click', (ev) => {
  const link = ev.target.closest('a[data-mr-tab]');
  if (!link || !element.contains(link)) return;
  ev.preventDefault();
  document.querySelector(`[role="tab"][data-tab-id="${link.dataset.mrTab}"]`)?.click();
  const end = performance.now() + 10000;
  const reveal = () => {  // the tab draws its contents once selected
    const heading = [...document.querySelectorAll(`${link.getAttribute('href')} h2`)]
      .find(h => h.textContent.includes(link.dataset.mrHeading));
    if (heading) heading.scrollIntoView({block: 'start'});
    else if (performance.now() < end) requestAnimationFrame(reveal);
  };
  requestAnimationFrame(reveal);
});
