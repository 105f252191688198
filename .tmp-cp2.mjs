import ts from 'typescript';
import { readdirSync, readFileSync, existsSync } from 'node:fs';
import { join, relative } from 'node:path';
const ROOT = process.cwd();
function walk(dir) { return readdirSync(dir, { withFileTypes: true }).flatMap((e) => e.isDirectory() ? walk(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : []); }
const files = ['src', 'db', 'jobs', 'test'].flatMap((d) => walk(join(ROOT, d)));
const PATH = /(?<![\w./*@-])((?:src|db|jobs|test|docs|bench|contrib)\/[\w./-]*?\.(?:ts|js|cjs|mjs|md|json|yml|yaml|sql))(?![\w/-])/g;
function comments(file, text) {
  const sf = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, false);
  const seen = new Map();
  const visit = (node) => {
    for (const r of [...(ts.getLeadingCommentRanges(text, node.pos) ?? []), ...(ts.getTrailingCommentRanges(text, node.end) ?? [])]) seen.set(r.pos, text.slice(r.pos, r.end));
    ts.forEachChild(node, visit);
  };
  visit(sf);
  // tokens between children (e.g. before `}` or `)`) are not nodes: scan the gaps' trivia too
  return [...seen.entries()];
}
let n=0;
const t0=Date.now();
for (const f of files) {
  const text = readFileSync(f, 'utf8');
  for (const [pos, c] of comments(f, text)) for (const m of c.matchAll(PATH)) { n++;
    const p = m[1];
    const ok = existsSync(join(ROOT, p)) || (/\.js$/.test(p) && existsSync(join(ROOT, p.replace(/\.js$/, '.ts'))));
    if (!ok) { const line = text.slice(0, pos + m.index).split('\n').length; console.log(`${relative(ROOT, f)}:${line}: ${p}`); }
  }
}
console.log('checked', n, Date.now()-t0, 'ms');
