import test from 'node:test';
import assert from 'node:assert/strict';
import { launchChromium } from '../lib/browsers.mjs';
import { Participant, expectGrowth } from '../lib/page.mjs';
import { scenario } from '../lib/scenario.mjs';

test('a relay-only participant gets media through the embedded TURN server', { timeout: 120_000 }, () =>
  scenario('relay', async ({ server, own, watch }) => {
    const chromium = own(await launchChromium());
    const direct = watch(new Participant('direct', await chromium.newPage()));
    const relayed = watch(new Participant('relayed', await chromium.newPage()));
    await direct.join(server.base, await server.token('relay', 'direct'));
    await relayed.join(server.base, await server.token('relay', 'relayed'), { relay: true });

    await relayed.seesVideoOf(direct);
    await direct.seesVideoOf(relayed);
    await expectGrowth('relayed video', () => relayed.inbound(), { framesDecoded: 10 });

    const types = await relayed.selectedCandidateTypes();
    assert.equal(types.subscriber?.local, 'relay', `subscriber path: ${JSON.stringify(types)}`);
    assert.equal(types.publisher?.local, 'relay', `publisher path: ${JSON.stringify(types)}`);
    // The direct participant is not forced through TURN: it still uses a host path.
    const directTypes = await direct.selectedCandidateTypes();
    assert.equal(directTypes.subscriber?.local, 'host', `direct subscriber path: ${JSON.stringify(directTypes)}`);
  }));
