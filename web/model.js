/* The book's model and gradient descent in the page: the live explorers' engine (web/explorer.js).
 *
 * One block of convres.model with one output (c = 1), in double precision, exactly as convres computes
 * it (book equations (1)-(5)):
 *
 *   S_b = softmax_rows(s X_b W_Q W_K^T X_b^T)   A = S X W_V   Z = A + beta X
 *   M = act(Z W_1)   H = M W_2 + beta Z   F = H W_U   Phi = 1/2 sum (F - Y)^2
 *
 * and full-batch gradient descent theta <- theta - mu grad Phi, with convres.gd's stopping rules.
 *
 * The attention weights never appear on their own: the logits use W_Q W_K^T, and only on the span of
 * the tokens. With Q (d x r) an orthonormal basis of the rows of the stacked X and R = X Q, the
 * logits are s R_b P R_b^T with P = (Q^T W_Q)(Q^T W_K)^T, and one gradient step on (W_Q, W_K) maps
 * (P, Gq, Gk) = (A B^T, A A^T, B B^T), A = Q^T W_Q, B = Q^T W_K, to (a = mu s, C = sum_b R_b^T dG_b R_b,
 * dG_b the gradient of the logits)
 *
 *   P'  = P  - a (C Gk + Gq C) + a^2 C P^T C
 *   Gq' = Gq - a (C P^T + P C^T) + a^2 C Gk C^T
 *   Gk' = Gk - a (C^T P + P^T C) + a^2 C^T Gq C,
 *
 * exactly (expand (A - a C B)(B - a C^T A)^T). So a step costs the same at every d_QK: d_QK enters
 * only through the initial P, Gq, Gk and the scale s. convres.explorers exports these r x r matrices
 * with X, R, Y and the other weights of each instance (explorers.instance_bank), and
 * tests/test_explorers.py checks this file against convres.gradient_descent.
 *
 * Runs in the browser (window.convresModel) and in node (module.exports), no dependencies.
 */
(function (root) {
  'use strict';

  // erf(x) = 2/sqrt(pi) exp(-x^2) sum_k 2^k x^(2k+1) / (1 3 5 ... (2k+1)): every term positive,
  // so no cancellation; |x| >= 6 gives +-1 to double precision.
  var TWO_OVER_SQRT_PI = 1.1283791670955126;
  function erf(x) {
    var ax = Math.abs(x);
    if (ax >= 6) return x > 0 ? 1 : -1;
    var x2 = ax * ax, term = ax, sum = ax;
    for (var k = 1; k < 200 && term > 1e-17 * sum; k++) {
      term *= 2 * x2 / (2 * k + 1);
      sum += term;
    }
    var v = TWO_OVER_SQRT_PI * Math.exp(-x2) * sum;
    return x < 0 ? -v : v;
  }

  var SQRT1_2 = Math.SQRT1_2, INV_SQRT_2PI = 0.3989422804014327;

  /* out (p x q) = a b, where a's entry (i, l) is a[i * ai + l * al] and b's entry (l, j) is
   * b[l * bl + j * bj] (so one kernel serves a b, a^T b and a b^T); p and q multiples of 4. Blocks of
   * 4 x 4 sums in registers: several times faster than the plain triple loop, and each entry is still
   * summed in the order l = 0, 1, ..., k - 1. */
  function gemm(a, ai, al, b, bl, bj, p, k, q, out) {
    for (var i = 0; i < p; i += 4) {
      var a0 = i * ai, a1 = a0 + ai, a2 = a1 + ai, a3 = a2 + ai;
      for (var j = 0; j < q; j += 4) {
        var c00 = 0, c01 = 0, c02 = 0, c03 = 0, c10 = 0, c11 = 0, c12 = 0, c13 = 0,
            c20 = 0, c21 = 0, c22 = 0, c23 = 0, c30 = 0, c31 = 0, c32 = 0, c33 = 0;
        for (var l = 0, ao = 0, bo = j * bj; l < k; l++, ao += al, bo += bl) {
          var b0 = b[bo], b1 = b[bo + bj], b2 = b[bo + 2 * bj], b3 = b[bo + 3 * bj];
          var x0 = a[a0 + ao], x1 = a[a1 + ao], x2 = a[a2 + ao], x3 = a[a3 + ao];
          c00 += x0 * b0; c01 += x0 * b1; c02 += x0 * b2; c03 += x0 * b3;
          c10 += x1 * b0; c11 += x1 * b1; c12 += x1 * b2; c13 += x1 * b3;
          c20 += x2 * b0; c21 += x2 * b1; c22 += x2 * b2; c23 += x2 * b3;
          c30 += x3 * b0; c31 += x3 * b1; c32 += x3 * b2; c33 += x3 * b3;
        }
        var o = i * q + j;
        out[o] = c00; out[o + 1] = c01; out[o + 2] = c02; out[o + 3] = c03; o += q;
        out[o] = c10; out[o + 1] = c11; out[o + 2] = c12; out[o + 3] = c13; o += q;
        out[o] = c20; out[o + 1] = c21; out[o + 2] = c22; out[o + 3] = c23; o += q;
        out[o] = c30; out[o + 1] = c31; out[o + 2] = c32; out[o + 3] = c33;
      }
    }
    return out;
  }
  // out = a b (a: p x k, b: k x q), a^T b (a: k x p) and a b^T (b: q x k), row-major.
  function mm(a, b, p, k, q, out) { return gemm(a, k, 1, b, q, 1, p, k, q, out); }
  function mtm(a, b, p, k, q, out) { return gemm(a, 1, p, b, q, 1, p, k, q, out); }
  function mmt(a, b, p, k, q, out) { return gemm(a, k, 1, b, 1, k, p, k, q, out); }

  // The singular values of a (rows x cols, rows <= cols), decreasing: one-sided Jacobi on the rows
  // (high relative accuracy even for the tiny ones of a collapsed attention output).
  function singularValues(a, rows, cols) {
    var u = Float64Array.from(a), sv = [];
    for (var sweep = 0; sweep < 60; sweep++) {
      var rotated = false;
      for (var i = 0; i < rows - 1; i++) {
        for (var j = i + 1; j < rows; j++) {
          var alpha = 0, beta = 0, gamma = 0, oi = i * cols, oj = j * cols;
          for (var k = 0; k < cols; k++) {
            alpha += u[oi + k] * u[oi + k]; beta += u[oj + k] * u[oj + k]; gamma += u[oi + k] * u[oj + k];
          }
          if (Math.abs(gamma) <= 1e-15 * Math.sqrt(alpha * beta) || gamma === 0) continue;
          rotated = true;
          var zeta = (beta - alpha) / (2 * gamma);
          var t = (zeta >= 0 ? 1 : -1) / (Math.abs(zeta) + Math.sqrt(1 + zeta * zeta));
          var c = 1 / Math.sqrt(1 + t * t), sn = c * t;
          for (k = 0; k < cols; k++) {
            var x = u[oi + k], y = u[oj + k];
            u[oi + k] = c * x - sn * y;
            u[oj + k] = sn * x + c * y;
          }
        }
      }
      if (!rotated) break;
    }
    for (i = 0; i < rows; i++) {
      var s2 = 0;
      for (k = 0; k < cols; k++) s2 += u[i * cols + k] * u[i * cols + k];
      sv.push(Math.sqrt(s2));
    }
    return sv.sort(function (p, q) { return q - p; });
  }

  // An instance (convres.explorers.instance_bank) decoded: base64 float64 (little-endian) arrays.
  function decode(b64) {
    var bin = typeof atob === 'function' ? atob(b64) : Buffer.from(b64, 'base64').toString('binary');
    var view = new DataView(new ArrayBuffer(bin.length));
    for (var i = 0; i < bin.length; i++) view.setUint8(i, bin.charCodeAt(i));
    var out = new Float64Array(bin.length / 8);
    for (i = 0; i < out.length; i++) out[i] = view.getFloat64(8 * i, true);
    return out;
  }

  /* One gradient-descent run. inst: {N, n, d, m, r, X, R, Y, V, W_1, W_2, W_U, P, Gq, Gk} (decoded
   * arrays; V = Q^T W_V, r x d: the value weights act on S X = S R Q^T only through it, and their
   * gradient (S X)^T dZ = Q (S R)^T dZ keeps the part outside the tokens' span fixed); opt: {beta, mu,
   * s, act ('relu' or 'gelu'), blowup (1e6), rtol (0)}. step() evaluates Phi(theta_t), applies the
   * stopping rules of convres.gd.stopping_rule and, unless the run stops there, takes the step; it
   * returns false once the run has stopped. loss[t] is Phi(theta_t). */
  function Run(inst, opt) {
    var N = inst.N, n = inst.n, d = inst.d, m = inst.m, r = inst.r, T = N * n;
    this.inst = inst;
    this.beta = opt.beta;
    this.mu = opt.mu;
    this.s = opt.s;
    this.relu = opt.act === 'relu';
    this.blowup = opt.blowup || 1e6;
    this.rtol = opt.rtol || 0;
    var copy = function (a) { return Float64Array.from(a); };
    this.W = {V: copy(inst.V), W_1: copy(inst.W_1), W_2: copy(inst.W_2), W_U: copy(inst.W_U),
              P: copy(inst.P), Gq: copy(inst.Gq), Gk: copy(inst.Gk)};
    var f = function (k) { return new Float64Array(k); };
    this.U = f(T * r); this.S = f(N * n * n); this.SR = f(T * r); this.Z = f(T * d); this.pre = f(T * m);
    this.M = f(T * m); this.cdf = f(T * m); this.w = f(m); this.res = f(T); this.v = f(m); this.dWU = f(d); this.dpre = f(T * m);
    this.dW1 = f(d * m); this.dZ = f(T * d); this.dV = f(r * d); this.dSR = f(T * r); this.dG = f(n * n); this.E = f(T * r);
    this.C = f(r * r); this.t1 = f(r * r); this.t2 = f(r * r); this.t3 = f(r * r); this.t4 = f(r * r);
    this.nP = f(r * r); this.nGq = f(r * r); this.nGk = f(r * r);
    this.loss = [];
    this.status = 'running';
    this.t = 0;
  }

  // The forward pass at the current weights; returns Phi. F = M (W_2 W_U) + beta Z W_U: the hidden
  // matrix H = M W_2 + beta Z itself is formed only when its spectrum is asked for (spectra()).
  Run.prototype.forward = function () {
    var I = this.inst, W = this.W, N = I.N, n = I.n, d = I.d, m = I.m, r = I.r, T = N * n;
    var R = I.R, X = I.X, Y = I.Y, s = this.s, beta = this.beta, S = this.S, U = this.U, SR = this.SR;
    var P = W.P, V = W.V, W1 = W.W_1, W2 = W.W_2, WU = W.W_U, Z = this.Z, w = this.w, res = this.res;
    var i, j, l, k;
    mm(R, P, T, r, r, U);                                  // U = R P (every sequence)
    for (var b = 0; b < N; b++) {
      var ro = b * n * r;
      for (i = 0; i < n; i++) {                            // S_b = softmax_rows(s U_b R_b^T)
        var so = (b * n + i) * n, uo = ro + i * r, mx = -Infinity, sum = 0;
        for (l = 0; l < n; l++) {
          var g = 0;
          for (k = 0; k < r; k++) g += U[uo + k] * R[ro + l * r + k];
          S[so + l] = s * g;
          if (S[so + l] > mx) mx = S[so + l];
        }
        for (l = 0; l < n; l++) { S[so + l] = Math.exp(S[so + l] - mx); sum += S[so + l]; }
        for (l = 0; l < n; l++) S[so + l] /= sum;
        for (j = 0; j < r; j++) {                          // S R, row i of sequence b
          var v = 0;
          for (l = 0; l < n; l++) v += S[so + l] * R[ro + l * r + j];
          SR[uo + j] = v;
        }
      }
    }
    mm(SR, V, T, r, d, Z);                                 // A = S X W_V = (S R) V
    for (i = 0; i < T * d; i++) Z[i] += beta * X[i];       // Z = A + beta X
    mm(Z, W1, T, d, m, this.pre);
    var pre = this.pre, M = this.M;
    if (this.relu) for (i = 0; i < T * m; i++) M[i] = pre[i] > 0 ? pre[i] : 0;
    else {                                                 // gelu(z) = z Phi(z), Phi kept for gelu'
      for (i = 0; i < T * m; i++) { this.cdf[i] = 0.5 * (1 + erf(pre[i] * SQRT1_2)); M[i] = pre[i] * this.cdf[i]; }
    }
    for (k = 0; k < m; k++) {                              // w = W_2 W_U
      var wk = 0;
      for (j = 0; j < d; j++) wk += W2[k * d + j] * WU[j];
      w[k] = wk;
    }
    var phi = 0;
    for (var t = 0; t < T; t++) {                          // F = M w + beta Z W_U
      var fm = 0, fz = 0;
      for (k = 0; k < m; k++) fm += M[t * m + k] * w[k];
      for (j = 0; j < d; j++) fz += Z[t * d + j] * WU[j];
      res[t] = fm + beta * fz - Y[t];
      phi += res[t] * res[t];
    }
    return 0.5 * phi;
  };

  // The gradient at the weights of the last forward pass, and the step theta - mu grad.
  Run.prototype.backward = function () {
    var I = this.inst, W = this.W, N = I.N, n = I.n, d = I.d, m = I.m, r = I.r, T = N * n;
    var R = I.R, beta = this.beta, mu = this.mu, res = this.res, i, j, k, l, t;
    // dH = res W_U^T (one output): dW_2 = v W_U^T with v = M^T res, dW_U = W_2^T v + beta Z^T res,
    // dM = res w^T
    for (k = 0; k < m; k++) {
      var vk = 0;
      for (t = 0; t < T; t++) vk += this.M[t * m + k] * res[t];
      this.v[k] = vk;
    }
    for (j = 0; j < d; j++) {
      var gu = 0, gz = 0;
      for (k = 0; k < m; k++) gu += W.W_2[k * d + j] * this.v[k];
      for (t = 0; t < T; t++) gz += this.Z[t * d + j] * res[t];
      this.dWU[j] = gu + beta * gz;
    }
    var pre = this.pre, dpre = this.dpre;
    for (t = 0; t < T; t++) {
      for (k = 0; k < m; k++) {
        var z = pre[t * m + k];
        var dz = this.relu ? (z > 0 ? 1 : 0) : this.cdf[t * m + k] + z * INV_SQRT_2PI * Math.exp(-0.5 * z * z);
        dpre[t * m + k] = res[t] * this.w[k] * dz;
      }
    }
    mtm(this.Z, dpre, d, T, m, this.dW1);                  // dW_1 = Z^T dpre
    mmt(dpre, W.W_1, T, m, d, this.dZ);                    // dZ = dpre W_1^T + beta dH
    for (t = 0; t < T; t++) for (j = 0; j < d; j++) this.dZ[t * d + j] += beta * res[t] * W.W_U[j];
    mtm(this.SR, this.dZ, r, T, d, this.dV);               // dV = (S R)^T dZ
    mmt(this.dZ, W.V, T, d, r, this.dSR);                  // d(S R) = dZ V^T
    // the logits: dS_b = d(SR)_b R_b^T, dG_b = S_b (dS_b - rowsum(dS_b S_b)), E_b = dG_b R_b and
    // C = sum_b R_b^T dG_b R_b = R^T E
    var dG = this.dG, S = this.S, E = this.E;
    for (var b = 0; b < N; b++) {
      var ro = b * n * r;
      for (i = 0; i < n; i++) {
        var so = (b * n + i) * n, dot = 0;
        for (l = 0; l < n; l++) {
          var ds = 0;
          for (k = 0; k < r; k++) ds += this.dSR[ro + i * r + k] * R[ro + l * r + k];
          dG[i * n + l] = ds;
          dot += ds * S[so + l];
        }
        for (l = 0; l < n; l++) dG[i * n + l] = S[so + l] * (dG[i * n + l] - dot);
        for (k = 0; k < r; k++) {
          var e = 0;
          for (l = 0; l < n; l++) e += dG[i * n + l] * R[ro + l * r + k];
          E[ro + i * r + k] = e;
        }
      }
    }
    var C = mtm(R, E, r, T, r, this.C);
    // the step
    for (i = 0; i < r * d; i++) W.V[i] -= mu * this.dV[i];
    for (i = 0; i < d * m; i++) W.W_1[i] -= mu * this.dW1[i];
    for (k = 0; k < m; k++) for (j = 0; j < d; j++) W.W_2[k * d + j] -= mu * (this.v[k] * W.W_U[j]);
    for (j = 0; j < d; j++) W.W_U[j] -= mu * this.dWU[j];
    // (P, Gq, Gk) for the step on (W_Q, W_K), a = mu s (see the top of this file)
    var a = mu * this.s, a2 = a * a, P = W.P, Gq = W.Gq, Gk = W.Gk;
    var t1 = this.t1, t2 = this.t2, t3 = this.t3, t4 = this.t4;
    mm(C, Gk, r, r, r, t1);                                // C Gk
    mm(Gq, C, r, r, r, t2);                                // Gq C
    mmt(C, P, r, r, r, t3);                                // C P^T
    mm(t3, C, r, r, r, t4);                                // C P^T C
    var nP = this.nP, nGq = this.nGq, nGk = this.nGk;
    for (i = 0; i < r * r; i++) nP[i] = P[i] - a * (t1[i] + t2[i]) + a2 * t4[i];
    mmt(t1, C, r, r, r, t4);                               // C Gk C^T
    for (i = 0; i < r; i++) {
      for (j = 0; j < r; j++) nGq[i * r + j] = Gq[i * r + j] - a * (t3[i * r + j] + t3[j * r + i]) + a2 * t4[i * r + j];
    }
    mtm(C, P, r, r, r, t1);                                // C^T P
    mtm(t2, C, r, r, r, t4);                               // C^T Gq C = (Gq C)^T C
    for (i = 0; i < r; i++) {
      for (j = 0; j < r; j++) nGk[i * r + j] = Gk[i * r + j] - a * (t1[i * r + j] + t1[j * r + i]) + a2 * t4[i * r + j];
    }
    this.nP = P; this.nGq = Gq; this.nGk = Gk;
    W.P = nP; W.Gq = nGq; W.Gk = nGk;
  };

  // One iterate: Phi(theta_t) and the stopping rules, then the step (at most maxSteps steps).
  // False once the run has stopped: 'diverged' (the loss is not finite or above blowup times the
  // first; that iterate is not kept), 'converged' (loss <= rtol Phi_0) or 'max_steps'. seen(t, phi),
  // if given, is called after the forward pass of theta_t (spectra() then describes theta_t).
  Run.prototype.step = function (maxSteps, seen) {
    if (this.status !== 'running') return false;
    var phi = this.forward(), t = this.t, phi0 = t === 0 ? phi : this.loss[0];
    if (!isFinite(phi) || (t > 0 && phi > this.blowup * phi0)) {
      this.status = 'diverged';
      if (t === 0) this.loss.push(phi);
      return false;
    }
    this.loss.push(phi);
    if (seen) seen(t, phi);
    if (phi <= this.rtol * phi0) { this.status = 'converged'; return false; }
    if (maxSteps !== undefined && t >= maxSteps) { this.status = 'max_steps'; return false; }
    this.backward();
    this.t += 1;
    return true;
  };

  // The singular values of the stacked Z and H = M W_2 + beta Z of the last forward pass (T x d,
  // T <= d), decreasing.
  Run.prototype.spectra = function () {
    var T = this.inst.N * this.inst.n, d = this.inst.d, H = mm(this.M, this.W.W_2, T, this.inst.m, d,
                                                               new Float64Array(T * d));
    for (var i = 0; i < T * d; i++) H[i] += this.beta * this.Z[i];
    return {Z: singularValues(this.Z, T, d), H: singularValues(H, T, d)};
  };

  // The smallest loss of outputs with equal rows within each sequence: 1/2 sum ||Y_b - mean||^2.
  function rankOneFloor(inst) {
    var floor = 0;
    for (var b = 0; b < inst.N; b++) {
      var mean = 0;
      for (var i = 0; i < inst.n; i++) mean += inst.Y[b * inst.n + i];
      mean /= inst.n;
      for (i = 0; i < inst.n; i++) floor += Math.pow(inst.Y[b * inst.n + i] - mean, 2);
    }
    return 0.5 * floor;
  }

  var api = {erf: erf, mm: mm, singularValues: singularValues, decode: decode,
             Run: Run, rankOneFloor: rankOneFloor};
  if (typeof module === 'object' && module.exports) module.exports = api;
  else root.convresModel = api;
})(this);
