"""The synchronous log core (spec §7): segments, logs, the log directory.

I/O goes through an injected ``FileSystem`` (``OsFileSystem`` in production,
``trikafka.testing.FakeFileSystem`` with a crash model in tests).  Nothing here imports Trio:
the broker calls these methods on its event loop and runs only the blocking
halves of flush, roll, retention and truncation tickets in worker threads.
"""

from .clock import ManualClock, wall_clock_ms
from .config import LogConfig
from .errors import (
    InvalidTopicError,
    LogBusyError,
    LogClosedError,
    LogError,
    LogFailedError,
    LogLoadError,
    OffsetOutOfRangeError,
    WrongFormatError,
    WrongPartitionError,
)
from .fs import FileSystem, OsFileSystem, OsSegmentFile, SegmentFile
from .kafka_offsets import KafkaOffsets
from .log import TIME_EARLIEST, TIME_LATEST, AppendResult, Log
from .manager import LogManager
from .names import CLEAN_SHUTDOWN_MARKER, FORMAT_FILE, partition_dir_name, segment_file_name, validate_topic
from .record_format import OffsetAssignment
from .segment import Segment
from .segment_list import SegmentList, SegmentView
from .flushing import FlushTicket, RollTicket
from .truncation import TruncateTicket

__all__ = [
    "AppendResult", "CLEAN_SHUTDOWN_MARKER", "FORMAT_FILE", "FileSystem", "FlushTicket",
    "InvalidTopicError", "KafkaOffsets", "Log", "LogBusyError", "LogClosedError", "LogConfig", "LogError",
    "LogFailedError", "LogLoadError", "LogManager", "ManualClock", "OffsetAssignment", "OffsetOutOfRangeError",
    "OsFileSystem", "OsSegmentFile", "RollTicket", "Segment", "SegmentFile", "SegmentList", "SegmentView",
    "TIME_EARLIEST", "TIME_LATEST", "TruncateTicket", "WrongFormatError", "WrongPartitionError",
    "partition_dir_name", "segment_file_name", "validate_topic", "wall_clock_ms",
]
