// Digital PTZ and fisheye dewarping of any video in the viewer: nothing goes to
// the camera, the browser zooms into the decoded picture.
//
// - Zoom/pan: the mouse wheel zooms around the pointer, dragging pans,
//   double-click resets. A CSS transform on the <video> (GPU-composited, no
//   copy of the frames); the view is clamped so the picture always covers it.
// - Dewarp: a WebGL canvas over the video renders a perspective view out of an
//   equidistant fisheye image (r = f·θ), as a ceiling or wall fisheye camera
//   delivers it. The wheel changes the field of view, dragging turns the
//   virtual camera (yaw around the lens axis, pitch away from it).
//
// The pure geometry (clamping, the fisheye mapping) is exported for the unit
// tests in web/test/dptz.test.ts; the shader does the same per pixel.

export interface View {
  /** Zoom factor, 1 = the whole picture. */
  scale: number;
  /** Translation in CSS pixels of the scaled picture's top-left corner. */
  x: number;
  y: number;
}

export const MAX_ZOOM = 8;

/** Keeps the scaled picture covering the w×h viewport. */
export function clampView(v: View, w: number, h: number): View {
  const scale = Math.min(MAX_ZOOM, Math.max(1, v.scale));
  const minX = w - w * scale;
  const minY = h - h * scale;
  return { scale, x: Math.min(0, Math.max(minX, v.x)), y: Math.min(0, Math.max(minY, v.y)) };
}

/** Zooms by factor around the viewport point (px, py), which stays put. */
export function zoomAt(v: View, factor: number, px: number, py: number, w: number, h: number): View {
  const scale = Math.min(MAX_ZOOM, Math.max(1, v.scale * factor));
  const k = scale / v.scale;
  return clampView({ scale, x: px - (px - v.x) * k, y: py - (py - v.y) * k }, w, h);
}

export interface Fisheye {
  /** Centre of the fisheye circle in texture coordinates (0..1). */
  cx: number;
  cy: number;
  /** Radius of the image circle as a fraction of the texture height. */
  radius: number;
  /** Field of view of the lens, radians (π for the usual 180° fisheye). */
  lensFov: number;
}

export interface Virtual {
  /** Turn around the lens axis, radians. */
  yaw: number;
  /** Tilt away from the lens axis, radians (0 = straight along it). */
  pitch: number;
  /** Horizontal field of view of the perspective view, radians. */
  fov: number;
}

/**
 * Maps an output pixel (u, v in -1..1, aspect = width/height) of the
 * perspective view to fisheye texture coordinates, or null outside the image
 * circle. Same formula as the fragment shader below.
 */
export function dewarpPoint(u: number, v: number, aspect: number, fe: Fisheye, vc: Virtual, texAspect: number): [number, number] | null {
  const t = Math.tan(vc.fov / 2);
  // Ray of the virtual camera, looking along +z.
  let x = u * t;
  let y = (v * t) / aspect;
  let z = 1;
  // Pitch: rotate around x; then yaw: rotate around the lens axis z.
  const cp = Math.cos(vc.pitch);
  const sp = Math.sin(vc.pitch);
  [y, z] = [y * cp - z * sp, y * sp + z * cp];
  const cy = Math.cos(vc.yaw);
  const sy = Math.sin(vc.yaw);
  [x, y] = [x * cy - y * sy, x * sy + y * cy];
  const len = Math.hypot(x, y, z);
  const theta = Math.acos(z / len); // angle from the lens axis
  if (theta > fe.lensFov / 2) return null;
  const r = (theta / (fe.lensFov / 2)) * fe.radius; // equidistant: r ∝ θ
  const phi = Math.atan2(y, x);
  return [fe.cx + (r * Math.cos(phi)) / texAspect, fe.cy + r * Math.sin(phi)];
}

const vertexShader = `
attribute vec2 pos;
varying vec2 uv;
void main() { uv = pos; gl_Position = vec4(pos, 0.0, 1.0); }`;

const fragmentShader = `
precision highp float;
varying vec2 uv;
uniform sampler2D tex;
uniform float aspect, texAspect, tanHalf, yaw, pitch, lensHalf, radius;
uniform vec2 centre;
void main() {
  vec3 d = vec3(uv.x * tanHalf, -uv.y * tanHalf / aspect, 1.0);
  float cp = cos(pitch), sp = sin(pitch);
  d = vec3(d.x, d.y * cp - d.z * sp, d.y * sp + d.z * cp);
  float cy = cos(yaw), sy = sin(yaw);
  d = vec3(d.x * cy - d.y * sy, d.x * sy + d.y * cy, d.z);
  float theta = acos(d.z / length(d));
  if (theta > lensHalf) { gl_FragColor = vec4(0.0, 0.0, 0.0, 1.0); return; }
  float r = theta / lensHalf * radius;
  float phi = atan(d.y, d.x);
  vec2 t = centre + vec2(r * cos(phi) / texAspect, r * sin(phi));
  gl_FragColor = texture2D(tex, t);
}`;

/** Digital PTZ (and optional dewarping) of one video element. */
export class DigitalPTZ {
  readonly box: HTMLElement;
  private view: View = { scale: 1, x: 0, y: 0 };
  private drag: { x: number; y: number; vx: number; vy: number; yaw: number; pitch: number } | null = null;
  private canvas: HTMLCanvasElement | null = null;
  private gl: WebGLRenderingContext | null = null;
  private prog: WebGLProgram | null = null;
  private raf = 0;
  private virt: Virtual = { yaw: 0, pitch: 0, fov: (90 * Math.PI) / 180 };
  fisheye: Fisheye = { cx: 0.5, cy: 0.5, radius: 0.5, lensFov: Math.PI };
  private readonly abort = new AbortController();

  /** Wraps video's parent box; the video must fill it (object-fit is respected by the transform). */
  constructor(readonly video: HTMLVideoElement) {
    this.box = video.parentElement ?? document.body;
    this.box.style.overflow = 'hidden';
    this.box.style.touchAction = 'none';
    video.style.transformOrigin = '0 0';
    const sig = { signal: this.abort.signal };
    this.box.addEventListener('wheel', (e) => this.onWheel(e), { ...sig, passive: false });
    this.box.addEventListener('pointerdown', (e) => this.onDown(e), sig);
    this.box.addEventListener('pointermove', (e) => this.onMove(e), sig);
    this.box.addEventListener('pointerup', () => (this.drag = null), sig);
    this.box.addEventListener('pointercancel', () => (this.drag = null), sig);
    this.box.addEventListener('dblclick', () => this.reset(), sig);
  }

  get zoom(): number {
    return this.dewarping ? Math.PI / 2 / this.virt.fov : this.view.scale;
  }

  get dewarping(): boolean {
    return this.canvas !== null;
  }

  reset(): void {
    this.view = { scale: 1, x: 0, y: 0 };
    this.virt = { yaw: 0, pitch: 0, fov: (90 * Math.PI) / 180 };
    this.apply();
  }

  /** Zoom by factor around the centre (buttons, keyboard). */
  zoomBy(factor: number): void {
    const r = this.box.getBoundingClientRect();
    if (this.dewarping) this.virt.fov = Math.min(2.6, Math.max(0.2, this.virt.fov / factor));
    else this.view = zoomAt(this.view, factor, r.width / 2, r.height / 2, r.width, r.height);
    this.apply();
  }

  /** Turns fisheye dewarping on or off; false if WebGL is unavailable. */
  setDewarp(on: boolean): boolean {
    if (on === this.dewarping) return true;
    if (!on) {
      cancelAnimationFrame(this.raf);
      this.canvas?.remove();
      this.canvas = null;
      this.gl = null;
      this.video.style.visibility = '';
      this.apply();
      return true;
    }
    const canvas = document.createElement('canvas');
    canvas.className = 'dewarp';
    canvas.style.cssText = 'position:absolute;inset:0;width:100%;height:100%;pointer-events:none';
    const gl = canvas.getContext('webgl', { premultipliedAlpha: false, preserveDrawingBuffer: false });
    if (!gl) return false;
    const prog = buildProgram(gl);
    if (!prog) return false;
    this.canvas = canvas;
    this.gl = gl;
    this.prog = prog;
    if (getComputedStyle(this.box).position === 'static') this.box.style.position = 'relative';
    this.box.appendChild(canvas);
    this.video.style.visibility = 'hidden';
    this.video.style.transform = '';
    const draw = () => {
      this.render();
      this.raf = requestAnimationFrame(draw);
    };
    this.raf = requestAnimationFrame(draw);
    return true;
  }

  destroy(): void {
    this.setDewarp(false);
    this.abort.abort();
    this.video.style.transform = '';
  }

  private onWheel(e: WheelEvent): void {
    e.preventDefault();
    const factor = Math.exp(-e.deltaY * 0.0015);
    if (this.dewarping) {
      this.virt.fov = Math.min(2.6, Math.max(0.2, this.virt.fov / factor));
    } else {
      const r = this.box.getBoundingClientRect();
      this.view = zoomAt(this.view, factor, e.clientX - r.left, e.clientY - r.top, r.width, r.height);
    }
    this.apply();
  }

  private onDown(e: PointerEvent): void {
    if (e.button !== 0 || (e.target as HTMLElement).closest('button, input, select')) return;
    this.box.setPointerCapture?.(e.pointerId);
    this.drag = { x: e.clientX, y: e.clientY, vx: this.view.x, vy: this.view.y, yaw: this.virt.yaw, pitch: this.virt.pitch };
  }

  private onMove(e: PointerEvent): void {
    if (!this.drag) return;
    const dx = e.clientX - this.drag.x;
    const dy = e.clientY - this.drag.y;
    const r = this.box.getBoundingClientRect();
    if (this.dewarping) {
      // One viewport width of drag turns by the field of view.
      this.virt.yaw = this.drag.yaw - (dx / r.width) * this.virt.fov;
      this.virt.pitch = Math.min(this.fisheye.lensFov / 2, Math.max(-this.fisheye.lensFov / 2, this.drag.pitch + (dy / r.height) * this.virt.fov));
    } else {
      this.view = clampView({ scale: this.view.scale, x: this.drag.vx + dx, y: this.drag.vy + dy }, r.width, r.height);
    }
    this.apply();
  }

  private apply(): void {
    if (this.dewarping) return; // the render loop reads virt
    const v = this.view;
    this.video.style.transform = v.scale === 1 ? '' : `translate(${v.x}px, ${v.y}px) scale(${v.scale})`;
    this.box.dataset.zoom = v.scale.toFixed(2);
  }

  private render(): void {
    const gl = this.gl;
    const canvas = this.canvas;
    const prog = this.prog;
    const v = this.video;
    if (!gl || !canvas || !prog || v.videoWidth === 0) return;
    const w = Math.round(canvas.clientWidth * devicePixelRatio);
    const h = Math.round(canvas.clientHeight * devicePixelRatio);
    if (canvas.width !== w || canvas.height !== h) {
      canvas.width = w;
      canvas.height = h;
    }
    gl.viewport(0, 0, w, h);
    gl.texImage2D(gl.TEXTURE_2D, 0, gl.RGBA, gl.RGBA, gl.UNSIGNED_BYTE, v);
    const u = (n: string) => gl.getUniformLocation(prog, n);
    gl.uniform1f(u('aspect'), w / Math.max(1, h));
    gl.uniform1f(u('texAspect'), v.videoWidth / v.videoHeight);
    gl.uniform1f(u('tanHalf'), Math.tan(this.virt.fov / 2));
    gl.uniform1f(u('yaw'), this.virt.yaw);
    gl.uniform1f(u('pitch'), this.virt.pitch);
    gl.uniform1f(u('lensHalf'), this.fisheye.lensFov / 2);
    gl.uniform1f(u('radius'), this.fisheye.radius);
    gl.uniform2f(u('centre'), this.fisheye.cx, this.fisheye.cy);
    gl.drawArrays(gl.TRIANGLE_STRIP, 0, 4);
    this.box.dataset.zoom = this.zoom.toFixed(2);
  }
}

function buildProgram(gl: WebGLRenderingContext): WebGLProgram | null {
  const compile = (type: number, src: string) => {
    const s = gl.createShader(type);
    if (!s) return null;
    gl.shaderSource(s, src);
    gl.compileShader(s);
    if (!gl.getShaderParameter(s, gl.COMPILE_STATUS)) {
      console.warn('dewarp shader:', gl.getShaderInfoLog(s));
      return null;
    }
    return s;
  };
  const vs = compile(gl.VERTEX_SHADER, vertexShader);
  const fs = compile(gl.FRAGMENT_SHADER, fragmentShader);
  const prog = gl.createProgram();
  if (!vs || !fs || !prog) return null;
  gl.attachShader(prog, vs);
  gl.attachShader(prog, fs);
  gl.linkProgram(prog);
  if (!gl.getProgramParameter(prog, gl.LINK_STATUS)) {
    console.warn('dewarp program:', gl.getProgramInfoLog(prog));
    return null;
  }
  gl.useProgram(prog);
  const buf = gl.createBuffer();
  gl.bindBuffer(gl.ARRAY_BUFFER, buf);
  gl.bufferData(gl.ARRAY_BUFFER, new Float32Array([-1, -1, 1, -1, -1, 1, 1, 1]), gl.STATIC_DRAW);
  const loc = gl.getAttribLocation(prog, 'pos');
  gl.enableVertexAttribArray(loc);
  gl.vertexAttribPointer(loc, 2, gl.FLOAT, false, 0, 0);
  const tex = gl.createTexture();
  gl.bindTexture(gl.TEXTURE_2D, tex);
  // Video frames are not powers of two: no mipmaps, clamp.
  gl.texParameteri(gl.TEXTURE_2D, gl.TEXTURE_MIN_FILTER, gl.LINEAR);
  gl.texParameteri(gl.TEXTURE_2D, gl.TEXTURE_MAG_FILTER, gl.LINEAR);
  gl.texParameteri(gl.TEXTURE_2D, gl.TEXTURE_WRAP_S, gl.CLAMP_TO_EDGE);
  gl.texParameteri(gl.TEXTURE_2D, gl.TEXTURE_WRAP_T, gl.CLAMP_TO_EDGE);
  gl.pixelStorei(gl.UNPACK_FLIP_Y_WEBGL, false);
  return prog;
}
