// Reads an emsf model file (Arrow IPC file, schema in docs/formats.md) with
// Arrow JS, independently of the Go code, and prints what it finds:
//
//   node scripts/read_model.mjs model.arrow
//
// apache-arrow is resolved from $EMSF_NODE_MODULES when set (the
// node_modules folder of an `npm install --prefix`), else as usual.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';

const base = process.env.EMSF_NODE_MODULES
  ? path.join(process.env.EMSF_NODE_MODULES, '..', 'resolve.js')
  : import.meta.url;
const { tableFromIPC } = createRequire(base)('apache-arrow');

const file = process.argv[2];
if (!file) {
  console.error('usage: node read_model.mjs MODEL.arrow');
  process.exit(2);
}
const table = tableFromIPC(readFileSync(file));
const meta = table.schema.metadata;
const need = (k) => {
  if (!meta.has(k)) throw new Error(`${file}: no metadata ${k}`);
  return meta.get(k);
};
const n = Number(need('emsf.n'));
const m = Number(need('emsf.m'));
const u = Number(need('emsf.u'));
const tie = need('emsf.tie');

const factor = table.getChild('factor');
const state = table.getChild('state');
const values = table.getChild('values');
if (!factor || !state || !values) throw new Error(`${file}: missing columns`);
if (values.type.listSize !== m) throw new Error(`${file}: values has ${values.type.listSize} per row, m is ${m}`);

let dRows = 0;
let kRows = 0;
let firstD = null;
let worst = 0; // largest |row sum - 1| over the rows of D
for (let i = 0; i < table.numRows; i++) {
  const f = factor.get(i);
  const v = values.get(i).toArray();
  if (f === 'D') {
    if (dRows === 0) firstD = v;
    dRows++;
    worst = Math.max(worst, Math.abs(v.reduce((a, b) => a + b, 0) - 1));
  } else if (f === 'K') {
    kRows++;
  } else {
    throw new Error(`${file}: row ${i} has factor ${f}`);
  }
  if (state.get(i) !== (dRows + kRows - 1) % n) throw new Error(`${file}: row ${i} has state ${state.get(i)}`);
}
const bits = (x) => {
  const dv = new DataView(new ArrayBuffer(8));
  dv.setFloat64(0, x, true);
  return dv.getBigUint64(0, true).toString(16).padStart(16, '0');
};
console.log(`n=${n}`);
console.log(`m=${m}`);
console.log(`u=${u}`);
console.log(`tie=${tie}`);
console.log(`d_rows=${dRows}`);
console.log(`k_rows=${kRows}`);
console.log(`d_shape=${dRows}x${m}`);
console.log(`k_shape=${kRows}x${m}`);
console.log(`d_rows_stochastic=${worst < 1e-9}`);
console.log(`d_first=${Array.from(firstD).join(',')}`);
console.log(`d_first_bits=${Array.from(firstD, bits).join(',')}`);
