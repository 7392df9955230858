package rtc

import (
	"github.com/pion/sdp/v3"
	"github.com/pion/webrtc/v4"
)

// Header extension URIs negotiated on every connection. Later stages (bandwidth
// estimation, simulcast, speaker detection) depend on them being present.
const (
	ExtAbsSendTime   = "http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time"
	ExtTransportCC   = "http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01"
	ExtAudioLevel    = "urn:ietf:params:rtp-hdrext:ssrc-audio-level"
	ExtDependencyDes = "https://aomediacodec.github.io/av1-rtp-spec/#dependency-descriptor-rtp-header-extension"
)

var videoFeedback = []webrtc.RTCPFeedback{
	{Type: "goog-remb"},
	{Type: webrtc.TypeRTCPFBTransportCC},
	{Type: webrtc.TypeRTCPFBCCM, Parameter: "fir"},
	{Type: webrtc.TypeRTCPFBNACK},
	{Type: webrtc.TypeRTCPFBNACK, Parameter: "pli"},
}

// Codecs are the media formats Petrel forwards. There is no RTX: publishers
// retransmit on the media SSRC, which keeps one sequence space per track and lets
// one cache answer every subscriber.
var Codecs = []webrtc.RTPCodecParameters{
	{RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2, SDPFmtpLine: "minptime=10;useinbandfec=1", RTCPFeedback: []webrtc.RTCPFeedback{{Type: webrtc.TypeRTCPFBTransportCC}}}, PayloadType: 111},
	{RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypePCMU, ClockRate: 8000, Channels: 1}, PayloadType: 0},
	{RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypePCMA, ClockRate: 8000, Channels: 1}, PayloadType: 8},

	{RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8, ClockRate: 90000, RTCPFeedback: videoFeedback}, PayloadType: 96},
	{RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP9, ClockRate: 90000, SDPFmtpLine: "profile-id=0", RTCPFeedback: videoFeedback}, PayloadType: 98},
	{RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeH264, ClockRate: 90000, SDPFmtpLine: "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f", RTCPFeedback: videoFeedback}, PayloadType: 102},
	{RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeH264, ClockRate: 90000, SDPFmtpLine: "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42001f", RTCPFeedback: videoFeedback}, PayloadType: 104},
	{RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeH264, ClockRate: 90000, SDPFmtpLine: "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=640032", RTCPFeedback: videoFeedback}, PayloadType: 106},
	{RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeAV1, ClockRate: 90000, RTCPFeedback: videoFeedback}, PayloadType: 45},
}

// KindOf is the media kind of one of Codecs: video runs at 90 kHz.
func KindOf(c webrtc.RTPCodecParameters) webrtc.RTPCodecType {
	if c.ClockRate == 90000 {
		return webrtc.RTPCodecTypeVideo
	}
	return webrtc.RTPCodecTypeAudio
}

// RegisterCodecs adds Petrel's codecs and header extensions to m.
func RegisterCodecs(m *webrtc.MediaEngine) error {
	for _, c := range Codecs {
		if err := m.RegisterCodec(c, KindOf(c)); err != nil {
			return err
		}
	}
	for _, ext := range []struct {
		uri   string
		kinds []webrtc.RTPCodecType
	}{
		{sdp.SDESMidURI, []webrtc.RTPCodecType{webrtc.RTPCodecTypeAudio, webrtc.RTPCodecTypeVideo}},
		{sdp.SDESRTPStreamIDURI, []webrtc.RTPCodecType{webrtc.RTPCodecTypeVideo}},
		{sdp.SDESRepairRTPStreamIDURI, []webrtc.RTPCodecType{webrtc.RTPCodecTypeVideo}},
		{ExtAbsSendTime, []webrtc.RTPCodecType{webrtc.RTPCodecTypeAudio, webrtc.RTPCodecTypeVideo}},
		{ExtTransportCC, []webrtc.RTPCodecType{webrtc.RTPCodecTypeAudio, webrtc.RTPCodecTypeVideo}},
		{ExtAudioLevel, []webrtc.RTPCodecType{webrtc.RTPCodecTypeAudio}},
		{ExtDependencyDes, []webrtc.RTPCodecType{webrtc.RTPCodecTypeVideo}},
	} {
		for _, k := range ext.kinds {
			if err := m.RegisterHeaderExtension(webrtc.RTPHeaderExtensionCapability{URI: ext.uri}, k); err != nil {
				return err
			}
		}
	}
	return nil
}
