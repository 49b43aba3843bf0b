/* MathJax 2's `MathJax.Hub.Queue`, as the ipywidgets embed manager (html-manager 1.x) calls it, on top
 * of the site's MathJax 3.
 *
 * embed-amd.js typesets widget labels with `MathJax.Hub.Queue(["Typeset", MathJax.Hub, element])`
 * whenever `window.MathJax` exists; MathJax 3 has no `Hub`, so every widget with a label threw
 * "Cannot read properties of undefined (reading 'Queue')". This file gives both the configuration
 * object (before MathJax 3 loads) and the MathJax 3 object (which replaces it when it loads) a `Hub`
 * whose `Queue` typesets the element through MathJax 3's API, after MathJax's own startup. Loaded
 * before require.js and embed-amd.js on pages with saved widgets (nb_ipywidgets_js in _config.yml).
 */
(function () {
  'use strict';
  function typeset(element) {
    var mj = window.MathJax;
    // Before MathJax 3 has loaded, its first pass over the page will typeset the element.
    if (!mj || !mj.startup || !mj.startup.promise) return;
    mj.startup.promise = mj.startup.promise
      .then(function () { return mj.typesetPromise(element ? [element] : undefined); })
      .catch(function (err) { console.warn('MathJax could not typeset a widget:', err); });
  }
  var hub = {
    Queue: function () {
      for (var i = 0; i < arguments.length; i++) {
        var job = arguments[i];
        if (Array.isArray(job) && job[0] === 'Typeset') typeset(job[2]);
        else if (typeof job === 'function') job();
      }
    }
  };
  function withHub(mj) {
    if (mj && typeof mj === 'object' && !mj.Hub) {
      Object.defineProperty(mj, 'Hub', {value: hub, enumerable: false, configurable: true});
    }
    return mj;
  }
  var current = withHub(window.MathJax);
  Object.defineProperty(window, 'MathJax', {
    configurable: true,
    enumerable: true,
    get: function () { return current; },
    set: function (value) { current = withHub(value); }
  });
})();
