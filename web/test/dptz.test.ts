// Geometry of the viewer's digital PTZ and fisheye dewarping (web/app/dptz.ts).
import assert from 'node:assert/strict';
import test from 'node:test';
import { clampView, dewarpPoint, zoomAt, MAX_ZOOM } from '../app/dptz.js';

const near = (a: number, b: number, eps = 1e-9) => assert.ok(Math.abs(a - b) < eps, `${a} != ${b}`);

test('zooming keeps the point under the pointer in place and the picture covering the view', () => {
  const w = 800;
  const h = 450;
  let v = { scale: 1, x: 0, y: 0 };
  v = zoomAt(v, 2, 200, 100, w, h);
  assert.equal(v.scale, 2);
  // The picture point under (200,100) before: (200,100); after: (200 - x)/scale.
  near((200 - v.x) / v.scale, 200);
  near((100 - v.y) / v.scale, 100);
  // Zooming past the limit stops at MAX_ZOOM; zooming out past 1 resets to the whole picture.
  assert.equal(zoomAt(v, 100, 0, 0, w, h).scale, MAX_ZOOM);
  assert.deepEqual(zoomAt(v, 0.1, 400, 200, w, h), { scale: 1, x: 0, y: 0 });
  // Panning cannot uncover the background.
  assert.deepEqual(clampView({ scale: 2, x: 50, y: -1000 }, w, h), { scale: 2, x: 0, y: -450 });
});

test('dewarping: the view centre looks along the lens axis, edges follow the equidistant model', () => {
  const fe = { cx: 0.5, cy: 0.5, radius: 0.5, lensFov: Math.PI };
  const ahead = { yaw: 0, pitch: 0, fov: Math.PI / 2 };
  const c = dewarpPoint(0, 0, 1, fe, ahead, 1);
  assert.ok(c);
  near(c[0], 0.5);
  near(c[1], 0.5);
  // The right edge of a 90° view is 45° off axis: half of the 90° half-angle, r = radius/2.
  const r = dewarpPoint(1, 0, 1, fe, ahead, 1);
  assert.ok(r);
  near(r[0], 0.75);
  near(r[1], 0.5);
  // Pitched 90° the centre looks at the horizon: the image circle's edge.
  const down = dewarpPoint(0, 0, 1, fe, { yaw: 0, pitch: Math.PI / 2, fov: Math.PI / 2 }, 1);
  assert.ok(down);
  near(Math.hypot(down[0] - 0.5, down[1] - 0.5), 0.5, 1e-6);
  // Yaw turns around the axis: same distance from the centre, another direction.
  const turned = dewarpPoint(0, 0, 1, fe, { yaw: Math.PI / 2, pitch: Math.PI / 4, fov: Math.PI / 2 }, 1);
  const base = dewarpPoint(0, 0, 1, fe, { yaw: 0, pitch: Math.PI / 4, fov: Math.PI / 2 }, 1);
  assert.ok(turned && base);
  near(Math.hypot(turned[0] - 0.5, turned[1] - 0.5), Math.hypot(base[0] - 0.5, base[1] - 0.5), 1e-9);
  assert.ok(Math.abs(turned[0] - base[0]) > 0.1 || Math.abs(turned[1] - base[1]) > 0.1);
  // Beyond the lens field of view there is nothing.
  assert.equal(dewarpPoint(0, -1, 1, fe, { yaw: 0, pitch: Math.PI / 2, fov: 2.5 }, 1), null);
  // A 16:9 texture: horizontal texture offsets shrink by the aspect.
  const wide = dewarpPoint(1, 0, 1, fe, ahead, 16 / 9);
  assert.ok(wide);
  near(wide[0], 0.5 + 0.25 / (16 / 9));
});
