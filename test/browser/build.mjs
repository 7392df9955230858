// Builds what the browser tests run: the web bundle, then the server binary that
// embeds it. Set PETREL_SKIP_BUILD=1 when bin/petrel is already fresh (make test).
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../../', import.meta.url));
const web = `${root}web`;

if (process.env.PETREL_SKIP_BUILD === '1') process.exit(0);

const run = (cmd, args, cwd) => {
  console.log(`build: ${cmd} ${args.join(' ')} (in ${cwd})`);
  execFileSync(cmd, args, { cwd, stdio: 'inherit' });
};
if (!existsSync(`${web}/node_modules`)) run('npm', ['ci', '--no-audit', '--no-fund'], web);
run('npm', ['run', 'build'], web);
run('npm', ['test'], web); // the SDK's Node unit tests: quick, and they guard the parts browsers rely on
run('go', ['build', '-o', 'bin/petrel', './cmd/petrel'], root);
