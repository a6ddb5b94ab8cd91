"""AV1: which temporal units no later frame can reference (none of their frames refreshes a reference slot,
AV1 spec 5.9.2/7.20), so they need not be decoded (docs/VIDEO_PREP.md); anything unclear means "keep"."""

from __future__ import annotations

from dataclasses import dataclass

OBU_SEQUENCE_HEADER = 1
OBU_TEMPORAL_DELIMITER = 2
OBU_FRAME_HEADER = 3
OBU_TILE_GROUP = 4
OBU_METADATA = 5
OBU_FRAME = 6
OBU_REDUNDANT_FRAME_HEADER = 7
OBU_PADDING = 15
#: OBUs that belong to the frame before them (or to none) and change no decoder state
_FRAME_PARTS = frozenset(
    {OBU_TEMPORAL_DELIMITER, OBU_TILE_GROUP, OBU_METADATA, OBU_REDUNDANT_FRAME_HEADER, OBU_PADDING}
)
KEY_FRAME, INTRA_ONLY_FRAME, SWITCH_FRAME = 0, 2, 3
SELECT = 2  # SELECT_SCREEN_CONTENT_TOOLS / SELECT_INTEGER_MV


class _Bits:
    """MSB-first bit reader (the spec's f(n) and uvlc())."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def f(self, n: int) -> int:
        value = 0
        for _ in range(n):
            byte = self.data[self.pos >> 3]  # IndexError past the end: the caller keeps the packet
            value = (value << 1) | ((byte >> (7 - (self.pos & 7))) & 1)
            self.pos += 1
        return value

    def uvlc(self) -> int:
        zeros = 0
        while not self.f(1):
            zeros += 1
            if zeros >= 32:
                return (1 << 32) - 1
        return self.f(zeros) + (1 << zeros) - 1


@dataclass(frozen=True)
class SequenceHeader:
    """The sequence header fields a frame header's first bits depend on."""

    reduced_still_picture_header: bool
    decoder_model_info_present: bool
    equal_picture_interval: bool
    buffer_removal_time_length: int
    frame_presentation_time_length: int
    decoder_model_present: tuple[bool, ...]
    operating_point_idc: tuple[int, ...]
    frame_id_length: int  # 0: frame ids not present
    force_screen_content_tools: int
    force_integer_mv: int
    order_hint_bits: int

    @property
    def single_layer(self) -> bool:
        """One operating point holding every layer: a decoder drops no OBU by layer."""
        return self.operating_point_idc == (0,)


def parse_sequence_header(payload: bytes) -> SequenceHeader:
    """AV1 spec 5.5.1, up to the order hint bits."""
    b = _Bits(payload)
    b.f(4)  # seq_profile, still_picture
    reduced = bool(b.f(1))
    decoder_model = equal_interval = False
    removal_len = presentation_len = delay_len = 0
    idcs: list[int] = []
    models: list[bool] = []
    if reduced:
        b.f(5)  # seq_level_idx[0]
        idcs, models = [0], [False]
    else:
        if b.f(1):  # timing_info_present_flag
            b.f(32), b.f(32)  # num_units_in_display_tick, time_scale
            equal_interval = bool(b.f(1))
            if equal_interval:
                b.uvlc()  # num_ticks_per_picture_minus_1
            decoder_model = bool(b.f(1))
            if decoder_model:
                delay_len = b.f(5) + 1
                b.f(32)  # num_units_in_decoding_tick
                removal_len = b.f(5) + 1
                presentation_len = b.f(5) + 1
        initial_display_delay = b.f(1)
        for _ in range(b.f(5) + 1):
            idcs.append(b.f(12))
            if b.f(5) > 7:  # seq_level_idx
                b.f(1)  # seq_tier
            present = bool(decoder_model and b.f(1))
            models.append(present)
            if present:
                b.f(delay_len), b.f(delay_len), b.f(1)  # decoder/encoder_buffer_delay, low_delay_mode_flag
            if initial_display_delay and b.f(1):
                b.f(4)  # initial_display_delay_minus_1
    width_bits, height_bits = b.f(4) + 1, b.f(4) + 1
    b.f(width_bits), b.f(height_bits)  # max_frame_width/height_minus_1
    id_len = 0
    if not reduced and b.f(1):  # frame_id_numbers_present_flag
        delta_len = b.f(4) + 2
        id_len = b.f(3) + 1 + delta_len
    b.f(3)  # use_128x128_superblock, enable_filter_intra, enable_intra_edge_filter
    screen, integer_mv, order_bits = SELECT, SELECT, 0
    if not reduced:
        b.f(4)  # interintra, masked compound, warped motion, dual filter
        order_hint = b.f(1)
        if order_hint:
            b.f(2)  # enable_jnt_comp, enable_ref_frame_mvs
        screen = SELECT if b.f(1) else b.f(1)
        if screen > 0:
            integer_mv = SELECT if b.f(1) else b.f(1)
        if order_hint:
            order_bits = b.f(3) + 1
    return SequenceHeader(
        reduced_still_picture_header=reduced,
        decoder_model_info_present=decoder_model,
        equal_picture_interval=equal_interval,
        buffer_removal_time_length=removal_len,
        frame_presentation_time_length=presentation_len,
        decoder_model_present=tuple(models),
        operating_point_idc=tuple(idcs),
        frame_id_length=id_len,
        force_screen_content_tools=screen,
        force_integer_mv=integer_mv,
        order_hint_bits=order_bits,
    )


def refresh_frame_flags(
    payload: bytes, seq: SequenceHeader, temporal_id: int = 0, spatial_id: int = 0
) -> int | None:
    """A frame header's ``refresh_frame_flags`` (AV1 spec 5.9.2); None for ``show_existing_frame``."""
    if seq.reduced_still_picture_header:
        return 0xFF  # a shown key frame
    b = _Bits(payload)
    if b.f(1):  # show_existing_frame: may refresh every slot (a shown key frame): keep
        return None
    frame_type, show_frame = b.f(2), b.f(1)
    if show_frame and seq.decoder_model_info_present and not seq.equal_picture_interval:
        b.f(seq.frame_presentation_time_length)  # frame_presentation_time
    if not show_frame:
        b.f(1)  # showable_frame
    if frame_type == SWITCH_FRAME or (frame_type == KEY_FRAME and show_frame):
        return 0xFF
    error_resilient = b.f(1)
    b.f(1)  # disable_cdf_update
    screen = b.f(1) if seq.force_screen_content_tools == SELECT else seq.force_screen_content_tools
    if screen and seq.force_integer_mv == SELECT:
        b.f(1)  # force_integer_mv
    if seq.frame_id_length:
        b.f(seq.frame_id_length)  # current_frame_id
    b.f(1)  # frame_size_override_flag (not a switch frame, not a reduced header)
    b.f(seq.order_hint_bits)  # order_hint
    if not (frame_type in (KEY_FRAME, INTRA_ONLY_FRAME) or error_resilient):
        b.f(3)  # primary_ref_frame
    if seq.decoder_model_info_present and b.f(1):  # buffer_removal_time_present_flag
        for idc, present in zip(seq.operating_point_idc, seq.decoder_model_present, strict=True):
            in_layer = (idc >> temporal_id) & 1 and (idc >> (spatial_id + 8)) & 1
            if present and (idc == 0 or in_layer):
                b.f(seq.buffer_removal_time_length)
    return b.f(8)


def _leb128(data: bytes, pos: int) -> tuple[int, int]:
    value = 0
    for i in range(8):
        byte = data[pos + i]
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            return value, pos + i + 1
    raise ValueError("leb128 longer than 8 bytes")


def obus(data: bytes) -> list[tuple[int, int, int, bytes, int]]:
    """A low-overhead temporal unit's OBUs: (type, temporal_id, spatial_id, payload, header offset)."""
    out = []
    pos = 0
    while pos < len(data):
        start, header = pos, data[pos]
        obu_type, extension, has_size = (header >> 3) & 15, (header >> 2) & 1, (header >> 1) & 1
        pos += 1
        temporal_id = spatial_id = 0
        if extension:
            temporal_id, spatial_id = data[pos] >> 5, (data[pos] >> 3) & 3
            pos += 1
        size, pos = _leb128(data, pos) if has_size else (len(data) - pos, pos)
        if pos + size > len(data):
            raise ValueError("OBU runs past the packet")
        out.append((obu_type, temporal_id, spatial_id, data[pos : pos + size], start))
        pos += size
    return out


def sequence_header_from_extradata(extradata: bytes | None) -> SequenceHeader | None:
    """The sequence header in an av1C record (ISO/IEC 14496 AV1 binding: 4 bytes, then OBUs)."""
    if not extradata or len(extradata) < 4 or extradata[0] != 0x81:
        return None
    return sequence_header_in(extradata[4:])


def sequence_header_in(data: bytes) -> SequenceHeader | None:
    """The last sequence header among a packet's OBUs, or None (or unreadable)."""
    seq = None
    try:
        for obu_type, _t, _s, payload, _at in obus(data):
            if obu_type == OBU_SEQUENCE_HEADER:
                seq = parse_sequence_header(payload)
    except (IndexError, ValueError):
        return None
    return seq


def unreferenced_from(data: bytes, seq: SequenceHeader | None) -> int | None:
    """The offset from which nothing in this temporal unit is referenced later: 0, all of it; k > 0, its last
    frames (shown after a hidden alternate reference); None, all needed, or anything not fully understood."""
    if seq is None or not seq.single_layer:
        return None
    cut: int | None = None  # where the current run of frames that refresh nothing began
    cut_is_first, frames = False, 0
    try:
        for obu_type, temporal_id, spatial_id, payload, start in obus(data):
            if obu_type in (OBU_FRAME, OBU_FRAME_HEADER):
                if refresh_frame_flags(payload, seq, temporal_id, spatial_id) != 0:
                    cut = None
                elif cut is None:
                    cut, cut_is_first = start, frames == 0
                frames += 1
            elif obu_type not in _FRAME_PARTS:  # a sequence header, a tile list, unknown
                return None
    except (IndexError, ValueError):
        return None
    return 0 if cut is not None and cut_is_first else cut


def references_nothing(data: bytes, seq: SequenceHeader | None) -> bool:
    """Whether no later frame can reference anything in this temporal unit (see ``unreferenced_from``)."""
    return unreferenced_from(data, seq) == 0
