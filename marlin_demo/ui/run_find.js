() => new Promise((done) => {
  const end = performance.now() + 30000;
  const step = () => {
    const run = document.querySelector('#find-run');
    if (run && !run.disabled && run.offsetParent !== null) { run.click(); done(); }
    else if (performance.now() > end) done();
    else requestAnimationFrame(step);
  };
  step();
})