//! Pieces shared by the pages.

pub mod actions;
pub mod bulk;
pub mod chart;
pub mod definition;
pub mod drain;
pub mod escape;
pub mod feed;
pub mod graph;
pub mod keys;
pub mod links;
pub mod live;
pub mod loaded;
pub mod notice;
pub mod session;
pub mod status;
pub mod tables;
pub mod time;
