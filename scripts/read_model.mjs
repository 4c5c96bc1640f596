// Reads an emsf model with Arrow JS, independently of the Go code, and
// prints what it finds. The model is one file (Arrow IPC, schema in
// docs/formats.md) or a model dataset: a directory, or its manifest.json,
// whose parts are read in the manifest's order after checking each one's
// size and SHA-256, and concatenated into one table.
//
//   node scripts/read_model.mjs model.arrow
//   node scripts/read_model.mjs model-dataset/
//
// apache-arrow is resolved from $EMSF_NODE_MODULES when set (the
// node_modules folder of an `npm install --prefix`), else as usual.
import { createHash } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';

const base = process.env.EMSF_NODE_MODULES
  ? path.join(process.env.EMSF_NODE_MODULES, '..', 'resolve.js')
  : import.meta.url;
const { tableFromIPC } = createRequire(base)('apache-arrow');

const file = process.argv[2];
if (!file) {
  console.error('usage: node read_model.mjs MODEL.arrow|DATASET');
  process.exit(2);
}

// readDataset reads the parts a manifest lists into one table, and returns
// it with the model's metadata (a Map, as a file's schema metadata).
function readDataset(manifestPath) {
  const dir = path.dirname(manifestPath);
  const man = JSON.parse(readFileSync(manifestPath, 'utf8'));
  if (man.format_version !== '1' || man.kind !== 'model_dataset') {
    throw new Error(`${manifestPath}: format_version ${man.format_version}, kind ${man.kind}`);
  }
  let table = null;
  for (const p of man.parts) {
    const bytes = readFileSync(path.join(dir, p.file));
    const sha = createHash('sha256').update(bytes).digest('hex');
    if (bytes.length !== p.bytes || sha !== p.sha256) {
      throw new Error(`${p.file}: ${bytes.length} bytes, sha256 ${sha}; the manifest says ${p.bytes}, ${p.sha256}`);
    }
    const t = tableFromIPC(bytes);
    const pm = t.schema.metadata;
    if (pm.get('emsf.part.factor') !== p.factor || Number(pm.get('emsf.part.lo')) !== p.lo || t.numRows !== p.rows) {
      throw new Error(`${p.file}: its metadata or rows disagree with the manifest`);
    }
    table = table === null ? t : table.concat(t);
  }
  return { table, meta: new Map(Object.entries(man.metadata)) };
}

const isDataset = statSync(file).isDirectory() || path.basename(file) === 'manifest.json';
const { table, meta } = isDataset
  ? readDataset(statSync(file).isDirectory() ? path.join(file, 'manifest.json') : file)
  : (() => {
      const t = tableFromIPC(readFileSync(file));
      return { table: t, meta: t.schema.metadata };
    })();
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

const action = table.getChild('action');
const whole = createHash('sha256'); // every row: factor, action, state, value bits
let dRows = 0;
let kRows = 0;
let firstD = null;
let worst = 0; // largest |row sum - 1| over the rows of D
for (let i = 0; i < table.numRows; i++) {
  const f = factor.get(i);
  const v = values.get(i).toArray();
  whole.update(`${f},${action.get(i)},${state.get(i)};`).update(new Uint8Array(Float64Array.from(v).buffer));
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
console.log(`table_sha256=${whole.digest('hex')}`);
