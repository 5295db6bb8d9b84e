#!/usr/bin/env python3
# The per-op timing of section 1 of 2026-11-29-weight-pages.md: instruments src/session/session.cpp of the tree
# given (a scratch copy: git worktree add /tmp/t HEAD) with a wall clock around each backend call of a
# pre-norm block, printed per decode step at exit when PROF_TMP is set. Usage: this.py TREE; then build TREE
# and run PROF_TMP=1 TREE/build/minigpt bench -m FILE -p 0 -n 128 -t 2 -r 4.
import sys
p=sys.argv[1] + '/src/session/session.cpp'
s=open(p).read()
s=s.replace('#include "minigpt/error.h"\n','''#include "minigpt/error.h"
#include <chrono>
#include <cstdio>
#include <cstdlib>
namespace { struct Prof { double t[16] = {}; long n = 0; ~Prof() { if (!std::getenv("PROF_TMP") || n == 0) return; const char* nm[] = {"norm","qkv","rope","store","attn","out","norm2","up","gact","down","head","embed"}; double tot=0; for (int i=0;i<12;++i) tot+=t[i]; for (int i = 0; i < 12; ++i) std::fprintf(stderr, "%-6s %8.1f us/step\\n", nm[i], t[i] / n * 1e6); std::fprintf(stderr,"total %8.1f us/step (%ld steps)\\n", tot/n*1e6, n);} } prof; 
struct T { int i; std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now(); ~T() { prof.t[i] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); } }; }
#define PT(i) T _pt_##i{i}
''')
def rep(a,b):
    global s
    assert a in s, a
    s=s.replace(a,b)
rep("""    if (c.projects_io()) {
      // OPT-350m""","""    if (n == 1) ++prof.n;
    if (c.projects_io()) {
      // OPT-350m""")
rep("""      if (c.pre_norm) norm(xn, x, L.attn_norm_w, L.attn_norm_b);
      stacked(qkv, attn_in, L.attn_qkv, L.attn_qkv_parts);""","""      if (c.pre_norm) { PT(0); norm(xn, x, L.attn_norm_w, L.attn_norm_b);}
      { PT(1); stacked(qkv, attn_in, L.attn_qkv, L.attn_qkv_parts);}""")
rep("""      } else if (c.position_encoding == PositionEncoding::Rotary) {
        be.rope(q,""","""      } else if (c.position_encoding == PositionEncoding::Rotary) { PT(2);
        be.rope(q,""")
rep("""      be.store_kv(cache, l, k, v, step);
      be.attention(att, q, cache, l, step, H, scale);""","""      { PT(3); be.store_kv(cache, l, k, v, step);}
      { PT(4); be.attention(att, q, cache, l, step, H, scale);}""")
rep("""        // x += proj(att); x += mlp(ln_2(x))
        be.linear(x, att, L.attn_out, true);
        norm(xn, x, L.ffn_norm_w, L.ffn_norm_b);
        mlp(x, xn, L);""","""        // x += proj(att); x += mlp(ln_2(x))
        { PT(5); be.linear(x, att, L.attn_out, true);}
        { PT(6); norm(xn, x, L.ffn_norm_w, L.ffn_norm_b);}
        mlp(x, xn, L);""")
rep("""        stacked(h, in, L.ffn_up, L.ffn_up_parts);
        be.gated_act(hg, h, c.activation);
        be.linear(out, hg, L.ffn_down, true);""","""        { PT(7); stacked(h, in, L.ffn_up, L.ffn_up_parts);}
        { PT(8); be.gated_act(hg, h, c.activation);}
        { PT(9); be.linear(out, hg, L.ffn_down, true);}""")
rep("""    Tensor xf = xn.row_slice(0, rows);""","""    PT(10); Tensor xf = xn.row_slice(0, rows);""")
open(p,'w').write(s)
