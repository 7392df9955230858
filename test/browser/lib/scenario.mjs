// One test's world: a fresh server, the browsers it launches and the participants
// it drives. On failure every participant leaves a screenshot and its console log
// in out/; whatever happens, browsers and server are stopped.
import { startServer } from './server.mjs';

export async function scenario(name, fn, { dev = false, args = [] } = {}) {
  const closers = [];
  const participants = [];
  let server;
  try {
    server = await startServer(name, { dev, args });
    closers.push(() => server.stop());
    await fn({
      server,
      // Registers a browser (or anything with close()) to be closed at the end.
      own: (b) => (closers.push(() => b.close()), b),
      // Registers a participant so that a failure captures its page.
      watch: (p) => (participants.push(p), p),
    });
  } catch (err) {
    await Promise.all(participants.map((p) => p.failureArtifacts(name)));
    if (server) err.message += `\n(server log: ${server.logPath}; screenshots and console logs: out/${name}-*)`;
    throw err;
  } finally {
    // Browsers first, so the server sees clean leaves, then the server.
    for (const close of closers.reverse()) await close();
  }
}
