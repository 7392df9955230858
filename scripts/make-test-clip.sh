#!/usr/bin/env bash
# make-test-clip.sh DIR [SECONDS] — the camera test clip, generated, never committed:
#   DIR/clip.h264   H.264 constrained baseline, Annex B with access unit delimiters,
#                   640x360, 25 fps, a keyframe every second (GOP 25), a burnt-in
#                   frame counter and timecode so a viewer's frame can be identified
#   DIR/clip.ulaw   G.711 mu-law, 8 kHz mono: a 440 Hz tone
#   DIR/clip.opus   Opus in Ogg, 48 kHz: the same tone
#   DIR/clip.aac    AAC-LC in ADTS, 16 kHz mono: the same tone (cameras that send AAC)
#   DIR/clip.h265   the same picture as H.265 (libx265, Main, GOP 25, no B-frames,
#                   access unit delimiters): H.265 cameras (emulator --video h265)
# The camera emulator (camera/emulator) loops these files. Idempotent: existing
# files newer than this script are kept.
set -euo pipefail
dir=${1:?usage: make-test-clip.sh DIR [SECONDS]}
secs=${2:-10}
mkdir -p "$dir"
if [[ -s $dir/clip.h264 && -s $dir/clip.h265 && -s $dir/clip.ulaw && -s $dir/clip.opus && -s $dir/clip.aac && $dir/clip.h264 -nt $0 ]]; then
	exit 0
fi
font=$(fc-match -f '%{file}' monospace 2>/dev/null || true)
text="drawtext=text='%{frame_num} %{pts\\:hms}':x=20:y=20:fontsize=36:fontcolor=white:box=1:boxcolor=black"
[[ -n $font ]] && text="$text:fontfile=$font"
video() { # $1: filter graph
	ffmpeg -nostdin -hide_banner -loglevel error -y \
	-f lavfi -i "testsrc2=size=640x360:rate=25:duration=$secs" \
	-vf "$1" -c:v libx264 -profile:v baseline -level 3.1 -pix_fmt yuv420p -preset veryfast -tune zerolatency \
	-g 25 -keyint_min 25 -sc_threshold 0 -bf 0 -b:v 800k -x264-params aud=1:repeat-headers=1 \
	-bsf:v h264_mp4toannexb -f h264 "$dir/clip.h264.tmp"
}
# Without a usable font (no fontconfig), the clip goes without its counter.
video "$text" 2>/dev/null || video null
# H.265 from the H.264 clip (same frames, counter included).
ffmpeg -nostdin -hide_banner -loglevel error -y -f h264 -r 25 -i "$dir/clip.h264.tmp" \
	-c:v libx265 -preset ultrafast -pix_fmt yuv420p -b:v 600k \
	-x265-params keyint=25:min-keyint=25:scenecut=0:bframes=0:aud=1:repeat-headers=1:log-level=error \
	-f hevc "$dir/clip.h265.tmp"
ffmpeg -nostdin -hide_banner -loglevel error -y -f lavfi -i "sine=frequency=440:sample_rate=8000:duration=$secs" \
	-c:a pcm_mulaw -f mulaw "$dir/clip.ulaw.tmp"
ffmpeg -nostdin -hide_banner -loglevel error -y -f lavfi -i "sine=frequency=440:sample_rate=48000:duration=$secs" \
	-c:a libopus -b:a 32k -frame_duration 20 -f ogg "$dir/clip.opus.tmp"
ffmpeg -nostdin -hide_banner -loglevel error -y -f lavfi -i "sine=frequency=440:sample_rate=16000:duration=$secs" \
	-c:a aac -b:a 32k -ac 1 -f adts "$dir/clip.aac.tmp"
for f in clip.h264 clip.h265 clip.ulaw clip.opus clip.aac; do mv "$dir/$f.tmp" "$dir/$f"; done
