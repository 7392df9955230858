#!/bin/sh
# Makes the small pre-encoded clips the load generator loops over (committed;
# rerun to regenerate): 6 s of 640x360 VP8 at 500 kbit/s in IVF (about 370 KB), 3 s
# of the same picture as H.264 Annex-B (baseline, no B-frames), and 10 s of a 440 Hz Opus
# tone in Ogg with one 20 ms packet per page (what loadtest.ReadOgg expects).
set -eu
cd "$(dirname "$0")"
command -v ffmpeg >/dev/null || { apt-get install -y ffmpeg >/dev/null; }
src="testsrc2=size=640x360:rate=30:duration=6"
ffmpeg -loglevel error -y -f lavfi -i "$src" -c:v libvpx -b:v 500k -minrate 500k -maxrate 500k \
	-deadline realtime -cpu-used 8 -g 30 -keyint_min 30 -auto-alt-ref 0 clip.ivf
ffmpeg -loglevel error -y -f lavfi -i "testsrc2=size=320x180:rate=30:duration=3" -c:v libx264 -profile:v baseline \
	-tune zerolatency -b:v 200k -g 30 -bsf:v h264_mp4toannexb -f h264 clip.h264
ffmpeg -loglevel error -y -f lavfi -i "sine=frequency=440:sample_rate=48000:duration=10" -c:a libopus -b:a 32k \
	-page_duration 20000 tone.ogg
ls -l clip.ivf clip.h264 tone.ogg
