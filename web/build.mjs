// Bundles the SDK and the app into dist/, which the Go binary embeds (embed.go).
// Type checking is a separate step (`tsc --noEmit` in `npm run build`): esbuild
// only strips types.
import { build } from 'esbuild';
import { copyFile, mkdir, readdir, rm } from 'node:fs/promises';

const dist = new URL('./dist/', import.meta.url);

// The end-to-end encryption worker (sdk/e2ee-worker.ts), inlined as a string into
// the SDK and the app, which start it from a Blob URL: one file to embed, no path to configure.
const worker = await build({ entryPoints: ['sdk/e2ee-worker.ts'], bundle: true, format: 'iife', minify: true, write: false, target: ['chrome110', 'firefox115', 'safari16'], logLevel: 'warning' });
const define = { __E2EE_WORKER__: JSON.stringify(worker.outputFiles[0].text) };

// `--tests`: compile the SDK unit tests for Node's test runner instead.
if (process.argv.includes('--tests')) {
  const { readdirSync } = await import('node:fs');
  const entryPoints = readdirSync(new URL('./test/', import.meta.url))
    .filter((f) => f.endsWith('.test.ts'))
    .map((f) => `test/${f}`);
  await rm(new URL('./.test-out/', import.meta.url), { recursive: true, force: true });
  await build({ entryPoints, outdir: '.test-out', bundle: true, platform: 'node', format: 'esm', define, outExtension: { '.js': '.mjs' }, logLevel: 'warning' });
  process.exit(0);
}

// Clear old bundles but keep .gitkeep, which keeps the embed directory in git.
await mkdir(dist, { recursive: true });
for (const f of await readdir(dist)) if (f !== '.gitkeep') await rm(new URL(f, dist), { recursive: true });

const common = { define, bundle: true, format: 'esm', target: ['chrome110', 'firefox115', 'safari16'], sourcemap: true, logLevel: 'info' };

// The HLS player (hls.js) is a chunk the app imports only on an HLS page.
await build({ ...common, entryPoints: { app: 'app/main.ts' }, outdir: 'dist', splitting: true, chunkNames: 'chunk-[hash]', minify: true });
// The camera page's early start (app/early.ts), loaded in the head before app.js.
await build({ ...common, entryPoints: ['app/early.ts'], outfile: 'dist/early.js', minify: true, format: 'iife' });
await build({ ...common, entryPoints: ['sdk/index.ts'], outfile: 'dist/petrel-sdk.js' });
// The recording timeline on its own, for pages built on the SDK bundle (and its browser test).
await build({ ...common, entryPoints: ['app/timeline.ts'], outfile: 'dist/timeline.js' });
await copyFile(new URL('./app/index.html', import.meta.url), new URL('index.html', dist));
await copyFile(new URL('./app/app.css', import.meta.url), new URL('app.css', dist));
